// Decoding of the TensorFlow protos of an event file (tfevents_proto.h): TensorProto with
// its dtypes (float16 and bfloat16 bit patterns included), hparams and plugin metadata.
#include "ingest/tfevents_proto.h"

#include "core/tag.h"

namespace trainscope::ingest::tfevents {

namespace {

namespace tensor_f {
constexpr uint32_t kDtype = 1, kShape = 2, kVersion = 3, kContent = 4, kFloatVal = 5, kDoubleVal = 6,
                   kIntVal = 7, kStringVal = 8, kInt64Val = 10, kBoolVal = 11, kHalfVal = 13;
}
enum DataType : int { kDtFloat = 1, kDtDouble = 2, kDtInt32 = 3, kDtInt64 = 9, kDtBool = 10, kDtBfloat16 = 14, kDtHalf = 19 };

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float f = static_cast<float>(mant) * std::ldexp(1.0f, -24);
      return (h & 0x8000) ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float Bfloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool DecodeShape(std::string_view bytes, Tensor* t) {
  Reader r(bytes);
  while (r.Next()) {
    if (r.field() == 2 && r.type() == wire::kLengthDelimited) {  // Dim
      Reader dim(r.bytes());
      int64_t size = 0;
      while (dim.Next()) {
        if (dim.field() == 1 && dim.type() == wire::kVarint) size = dim.int64();
      }
      if (dim.error()) return false;
      t->dims.push_back(size);
    } else if (r.field() == 3 && r.type() == wire::kVarint) {
      t->unknown_rank = r.varint() != 0;
    }
  }
  return r.error() == nullptr;
}

}  // namespace

bool DecodeTensor(std::string_view bytes, Tensor* t) {
  Reader r(bytes);
  std::string_view content;
  bool has_content = false;
  // half_val's raw 16-bit patterns, kept apart from the values of the other fields: only the
  // dtype (which may come later on the wire) says how to read them.
  std::vector<uint16_t> half_bits;
  while (r.Next()) {
    switch (r.field()) {
      case tensor_f::kDtype:
        t->dtype = static_cast<int>(r.varint());
        break;
      case tensor_f::kShape:
        if (r.type() != wire::kLengthDelimited || !DecodeShape(r.bytes(), t)) return false;
        break;
      case tensor_f::kVersion:
        break;
      case tensor_f::kContent:
        if (r.type() != wire::kLengthDelimited) return false;
        content = r.bytes();
        has_content = true;
        break;
      case tensor_f::kFloatVal:
        if (!AppendRepeated(r, wire::kFixed32, &t->values, AsFloat)) return false;
        break;
      case tensor_f::kDoubleVal:
        if (!AppendRepeated(r, wire::kFixed64, &t->values, AsDouble)) return false;
        break;
      case tensor_f::kIntVal:
      case tensor_f::kInt64Val:
      case tensor_f::kBoolVal:
        if (!AppendRepeated(r, wire::kVarint, &t->values,
                            [](uint64_t v) { return static_cast<double>(static_cast<int64_t>(v)); }))
          return false;
        break;
      case tensor_f::kHalfVal:
        // half_val holds the raw 16-bit patterns of DT_HALF and DT_BFLOAT16 as int32 (the
        // low 16 bits are the pattern).
        if (!AppendRepeated(r, wire::kVarint, &half_bits, [](uint64_t v) { return static_cast<uint16_t>(v); }))
          return false;
        break;
      case tensor_f::kStringVal:
        t->numeric = false;
        break;
      default:
        ++t->unknown_fields;
        break;
    }
  }
  if (r.error()) return false;
  if (has_content) {
    t->values.clear();
    size_t width = 0;
    switch (t->dtype) {
      case kDtFloat: case kDtInt32: width = 4; break;
      case kDtDouble: case kDtInt64: width = 8; break;
      case kDtHalf: case kDtBfloat16: width = 2; break;
      case kDtBool: width = 1; break;
      default: t->numeric = false; return true;
    }
    if (content.size() % width) return false;
    const size_t n = content.size() / width;
    t->values.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const char* p = content.data() + i * width;
      switch (t->dtype) {
        case kDtFloat: { float f; std::memcpy(&f, p, 4); t->values.push_back(f); break; }
        case kDtDouble: { double d; std::memcpy(&d, p, 8); t->values.push_back(d); break; }
        case kDtInt32: { int32_t v; std::memcpy(&v, p, 4); t->values.push_back(v); break; }
        case kDtInt64: { int64_t v; std::memcpy(&v, p, 8); t->values.push_back(static_cast<double>(v)); break; }
        case kDtHalf: { uint16_t v; std::memcpy(&v, p, 2); t->values.push_back(HalfToFloat(v)); break; }
        case kDtBfloat16: { uint16_t v; std::memcpy(&v, p, 2); t->values.push_back(Bfloat16ToFloat(v)); break; }
        case kDtBool: t->values.push_back(*p ? 1.0 : 0.0); break;
      }
    }
  } else if (t->dtype == kDtHalf || t->dtype == kDtBfloat16) {
    // Values another field put beside them (a damaged record) are values, not patterns:
    // they stay as they are; a NaN among them stays a NaN.
    for (uint16_t raw : half_bits) t->values.push_back(t->dtype == kDtHalf ? HalfToFloat(raw) : Bfloat16ToFloat(raw));
  } else if (!half_bits.empty()) {
    return false;  // 16-bit patterns under a dtype that is not 16-bit: nothing to read them as
  } else if (t->dtype != kDtFloat && t->dtype != kDtDouble && t->dtype != kDtInt32 && t->dtype != kDtInt64 &&
             t->dtype != kDtBool) {
    t->numeric = false;
  }
  return true;
}

bool DecodeHparams(std::string_view content, nlohmann::json* out) {
  Reader plugin(content);
  while (plugin.Next()) {
    if (plugin.field() != 3 || plugin.type() != wire::kLengthDelimited) continue;  // session_start_info
    Reader start(plugin.bytes());
    while (start.Next()) {
      if (start.field() != 1 || start.type() != wire::kLengthDelimited) continue;  // hparams map entry
      Reader entry(start.bytes());
      std::string key;
      nlohmann::json value;
      while (entry.Next()) {
        if (entry.field() == 1 && entry.type() == wire::kLengthDelimited) {
          key = std::string(entry.bytes());
        } else if (entry.field() == 2 && entry.type() == wire::kLengthDelimited) {
          Reader v(entry.bytes());  // google.protobuf.Value
          while (v.Next()) {
            if (v.field() == 2 && v.type() == wire::kFixed64) value = v.fixed64_double();
            else if (v.field() == 3 && v.type() == wire::kLengthDelimited) value = std::string(v.bytes());
            else if (v.field() == 4 && v.type() == wire::kVarint) value = v.varint() != 0;
          }
          if (v.error()) return false;
        }
      }
      if (entry.error()) return false;
      if (!key.empty() && IsValidUtf8(key) && (!value.is_string() || IsValidUtf8(value.get<std::string>())))
        (*out)[key] = value;
    }
    if (start.error()) return false;
  }
  return plugin.error() == nullptr;
}

bool DecodeMetadata(std::string_view bytes, PluginInfo* info) {
  Reader r(bytes);
  while (r.Next()) {
    if (r.field() == 1 && r.type() == wire::kLengthDelimited) {  // plugin_data
      Reader pd(r.bytes());
      while (pd.Next()) {
        if (pd.field() == 1 && pd.type() == wire::kLengthDelimited) info->name = std::string(pd.bytes());
        else if (pd.field() == 2 && pd.type() == wire::kLengthDelimited) info->content = pd.bytes();
      }
      if (pd.error()) return false;
    }
  }
  return r.error() == nullptr;
}

}  // namespace trainscope::ingest::tfevents
