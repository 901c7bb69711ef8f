// Whole-run series in fixed memory (issue 28): a detector that judges the shape of a whole
// run (a plateau, a leak, a trend at chance level) keeps at most `capacity` points of it.
// When the columns fill up, every other row is dropped and from then on only every
// stride-th arrival is kept, so the rows stay evenly spread over the whole run and the
// first one always stays. Medians, robust slopes and "the last fifth of the run" read the
// same from them; a run shorter than the capacity is judged on every point, as before.
#pragma once

#include <cstddef>
#include <vector>

namespace trainscope::doctor {

// 8,192 rows: a run logging one loss a step is judged on every point for its first 8,192
// steps, and every few steps after that, for 64 KB a column.
inline constexpr size_t kThinnedCapacity = 8192;

class Thinning {
 public:
  Thinning() = default;
  explicit Thinning(size_t capacity) : capacity_(capacity < 2 ? 2 : capacity) {}

  // Counts an arrival; true when it is to be appended to the columns.
  bool Admit() { return arrivals_++ % stride_ == 0; }

  // After a row was appended to each of the parallel columns: once they hold `capacity`
  // rows, keeps the even ones and doubles the stride.
  template <typename... Columns>
  void Trim(Columns&... columns) {
    if (Rows(columns...) < capacity_) return;
    (Halve(columns), ...);
    stride_ *= 2;
  }

  // Every point seen, kept or not.
  size_t arrivals() const { return arrivals_; }
  // One row kept per `stride` arrivals (1 until the first trim).
  size_t stride() const { return stride_; }

 private:
  template <typename Column, typename... Rest>
  static size_t Rows(const Column& first, const Rest&...) {
    return first.size();
  }
  template <typename Column>
  static void Halve(Column& column) {
    size_t kept = 0;
    for (size_t i = 0; i < column.size(); i += 2) column[kept++] = column[i];
    column.resize(kept);
  }

  size_t capacity_ = kThinnedCapacity;
  size_t arrivals_ = 0;
  size_t stride_ = 1;
};

}  // namespace trainscope::doctor
