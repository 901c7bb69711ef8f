// The TensorFlow protos an event file holds, decoded from the wire (proto_wire.h): the field
// numbers of Event, Summary.Value and HistogramProto, TensorProto (scalars and histogram
// tensors), the hparams plugin's session start and a value's plugin metadata.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ingest/proto_wire.h"

namespace trainscope::ingest::tfevents {

using wire::Reader;

// Field numbers, from tensorflow/core/util/event.proto, framework/summary.proto,
// framework/tensor.proto, tensor_shape.proto and tensorboard's plugin protos.
namespace event_f {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kGraphDef = 4, kSummary = 5, kLogMessage = 6,
                   kSessionLog = 7, kTaggedRunMetadata = 8, kMetaGraphDef = 9, kSourceMetadata = 10;
}
namespace value_f {
constexpr uint32_t kTag = 1, kSimpleValue = 2, kOldHistogram = 3, kImage = 4, kHisto = 5, kAudio = 6,
                   kNodeName = 7, kTensor = 8, kMetadata = 9;
}
namespace histo_f {
constexpr uint32_t kMin = 1, kMax = 2, kNum = 3, kSum = 4, kSumSquares = 5, kBucketLimit = 6, kBucket = 7;
}

// A TensorProto decoded far enough for scalars and histogram tensors.
struct Tensor {
  int dtype = 0;
  std::vector<int64_t> dims;
  bool unknown_rank = false;
  std::vector<double> values;  // numeric elements, in order
  bool numeric = true;         // false for strings and kinds we do not read
  uint64_t unknown_fields = 0;
};

// Appends the elements of a repeated scalar field, packed or not.
template <class T, class Decode>
inline bool AppendRepeated(const Reader& r, wire::WireType element_type, std::vector<T>* out, Decode decode) {
  if (r.type() == wire::kLengthDelimited) {
    const std::string_view b = r.bytes();
    if (element_type == wire::kFixed32) {
      if (b.size() % 4) return false;
      out->reserve(out->size() + b.size() / 4);
      for (size_t i = 0; i < b.size(); i += 4) {
        uint32_t v;
        std::memcpy(&v, b.data() + i, 4);
        out->push_back(decode(v));
      }
    } else if (element_type == wire::kFixed64) {
      if (b.size() % 8) return false;
      out->reserve(out->size() + b.size() / 8);
      for (size_t i = 0; i < b.size(); i += 8) {
        uint64_t v;
        std::memcpy(&v, b.data() + i, 8);
        out->push_back(decode(v));
      }
    } else {  // varints: decode them with a Reader over a synthetic stream
      const uint8_t* p = reinterpret_cast<const uint8_t*>(b.data());
      const uint8_t* end = p + b.size();
      while (p < end) {
        uint64_t v = 0;
        int shift = 0;
        bool done = false;
        while (p < end && shift < 70) {
          const uint8_t byte = *p++;
          v |= static_cast<uint64_t>(byte & 0x7f) << (shift < 64 ? shift : 63);
          shift += 7;
          if (!(byte & 0x80)) {
            done = true;
            break;
          }
        }
        if (!done) return false;
        out->push_back(decode(v));
      }
    }
    return true;
  }
  if (r.type() != element_type) return false;
  out->push_back(decode(r.varint()));
  return true;
}

inline double AsFloat(uint64_t v) {
  const uint32_t u = static_cast<uint32_t>(v);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double AsDouble(uint64_t v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}

// Returns false if the bytes are not a valid TensorProto.
bool DecodeTensor(std::string_view bytes, Tensor* t);

// Decodes the hparams plugin's session_start_info into a JSON object of hparam values.
bool DecodeHparams(std::string_view content, nlohmann::json* out);

struct PluginInfo {
  std::string name;
  std::string_view content;
};

bool DecodeMetadata(std::string_view bytes, PluginInfo* info);

}  // namespace trainscope::ingest::tfevents
