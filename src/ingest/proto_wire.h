// A small protocol-buffer wire codec: enough to read and write TensorBoard's Event,
// Summary, HistogramProto and TensorProto without generated code.
//
// Why hand-written rather than libprotobuf: an event file is millions of tiny messages of
// which we want a handful of fields; decoding in place (strings and packed arrays are
// views into the mapped file) avoids an allocation per message and the generated-code
// build step, and unknown fields are skipped by wire type, as protobuf itself does.
//
// Reader never reads outside [data, data + size): every length is checked against what is
// left, and a malformed message makes Next() return false with error() set.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace trainscope::ingest::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

class Reader {
 public:
  Reader(const void* data, size_t size)
      : p_(static_cast<const uint8_t*>(data)), end_(p_ + size) {}
  explicit Reader(std::string_view bytes) : Reader(bytes.data(), bytes.size()) {}

  // Advances to the next field; false at the end of the message or on malformed input
  // (then error() is non-null and says what was wrong).
  bool Next() {
    if (p_ >= end_) return false;
    uint64_t key;
    if (!ReadVarint(&key)) return Fail("truncated field key");
    field_ = static_cast<uint32_t>(key >> 3);
    type_ = static_cast<WireType>(key & 7);
    if (field_ == 0) return Fail("field number 0");
    switch (type_) {
      case kVarint:
        if (!ReadVarint(&varint_)) return Fail("truncated varint");
        return true;
      case kFixed64:
        if (end_ - p_ < 8) return Fail("truncated fixed64");
        std::memcpy(&varint_, p_, 8);
        p_ += 8;
        return true;
      case kFixed32: {
        if (end_ - p_ < 4) return Fail("truncated fixed32");
        uint32_t v;
        std::memcpy(&v, p_, 4);
        varint_ = v;
        p_ += 4;
        return true;
      }
      case kLengthDelimited: {
        uint64_t len;
        if (!ReadVarint(&len)) return Fail("truncated length");
        if (len > static_cast<uint64_t>(end_ - p_)) return Fail("length runs past the end of the message");
        bytes_ = std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(len));
        p_ += len;
        return true;
      }
      default:
        // Groups are deprecated and TensorBoard's protos have none.
        return Fail("unsupported wire type (group)");
    }
  }

  uint32_t field() const { return field_; }
  WireType type() const { return type_; }
  uint64_t varint() const { return varint_; }
  int64_t int64() const { return static_cast<int64_t>(varint_); }
  double fixed64_double() const {
    double d;
    std::memcpy(&d, &varint_, 8);
    return d;
  }
  float fixed32_float() const {
    const uint32_t v = static_cast<uint32_t>(varint_);
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  }
  std::string_view bytes() const { return bytes_; }
  const char* error() const { return error_; }

 private:
  bool ReadVarint(uint64_t* out) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70 && p_ < end_; shift += 7) {
      const uint8_t b = *p_++;
      result |= static_cast<uint64_t>(b & 0x7f) << (shift < 64 ? shift : 63);
      if (!(b & 0x80)) {
        *out = result;
        return true;
      }
    }
    return false;
  }
  bool Fail(const char* what) {
    error_ = what;
    p_ = end_;
    return false;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t field_ = 0;
  WireType type_ = kVarint;
  uint64_t varint_ = 0;
  std::string_view bytes_;
  const char* error_ = nullptr;
};

// Appends fields to a byte string. Nested messages are written into their own Writer and
// added with Bytes().
class Writer {
 public:
  void Varint(uint32_t field, uint64_t v) {
    Key(field, kVarint);
    PutVarint(v);
  }
  void Double(uint32_t field, double v) {
    Key(field, kFixed64);
    char b[8];
    std::memcpy(b, &v, 8);
    out_.append(b, 8);
  }
  void Float(uint32_t field, float v) {
    Key(field, kFixed32);
    char b[4];
    std::memcpy(b, &v, 4);
    out_.append(b, 4);
  }
  void Bytes(uint32_t field, std::string_view v) {
    Key(field, kLengthDelimited);
    PutVarint(v.size());
    out_.append(v.data(), v.size());
  }
  // A packed repeated double field.
  void PackedDoubles(uint32_t field, const double* v, size_t n) {
    Key(field, kLengthDelimited);
    PutVarint(n * 8);
    out_.append(reinterpret_cast<const char*>(v), n * 8);  // little-endian hosts only
  }
  const std::string& data() const { return out_; }
  std::string& mutable_data() { return out_; }
  void Clear() { out_.clear(); }

 private:
  void Key(uint32_t field, WireType t) { PutVarint((static_cast<uint64_t>(field) << 3) | t); }
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

}  // namespace trainscope::ingest::wire
