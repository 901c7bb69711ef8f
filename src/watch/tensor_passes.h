// The passes run.watch() makes over tensors in host memory, in place (no copy): the
// statistics of a tensor, optionally with the L2 norm of each row (a weight matrix's output
// units, a conv kernel's output channels), weight and update statistics in one pass that
// also refreshes the previous-weights snapshot, and the activation extras (dead units,
// saturated values).
//
// The caller guarantees the pointers address `n` (or rows * row_len, outer * units *
// inner) contiguous values of the given dtype that stay alive and unmodified for the call.
// Every function is thread-safe and may run without the Python GIL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/sample.h"

namespace trainscope::watch {

// The floating dtypes the passes read. Codes are stable: Python passes them as ints.
enum class DType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };
bool ValidDType(int code);

TensorStats StatsOf(const void* data, size_t n, DType dtype, bool histogram);

// Stats of rows * row_len values, and the L2 norm of each row into row_norms (resized to
// rows); a NaN in a row makes its norm NaN, an Inf makes it Inf, so a heatmap shows them.
TensorStats StatsWithRowNorms(const void* data, size_t rows, size_t row_len, DType dtype, bool histogram,
                              std::vector<float>* row_norms);

// Stats of `current` (the weights after an optimizer step) and of current - previous (the
// update), then copies current into previous. The update is formed block by block in a
// per-thread buffer (no tensor-sized temporary); each block of previous is refreshed as
// soon as its difference is taken.
void WeightAndUpdateStats(const void* current, void* previous, size_t n, DType dtype, bool histogram,
                          TensorStats* weight, TensorStats* update);

// Fraction of units that are exactly zero for every sample: the tensor is read as
// [outer][units][inner] (a unit is a feature of a Linear output: inner = 1, or a channel of
// an NCHW conv output: inner = H*W). 0 when units is 0.
double DeadFraction(const void* data, size_t outer, size_t units, size_t inner, DType dtype);

enum class Saturation { kTanh, kSigmoid };
// Fraction of finite values in the flat tails (data/tensor_stats.json's thresholds of
// saturated_fraction): |x| > high (tanh), x < low or x > high (sigmoid). NaN when n is 0.
double SaturatedFraction(const void* data, size_t n, DType dtype, Saturation kind);

// What a module makes its output, as Python passes it (_watch/plan.py PLAIN, DEAD_UNITS,
// TANH, SIGMOID): it decides which measured statistics the output gets.
enum ActivationKind : int { kPlain = 0, kDeadUnits = 1, kTanh = 2, kSigmoid = 3 };

// The measured statistics (data/tensor_stats.json) of an activation of `numel` values,
// read as [outer][units][inner] where units matter, into *out; those its kind does not get
// stay NaN. The host pass of every row of the table is here.
void MeasureActivation(const void* data, size_t numel, size_t outer, size_t units, size_t inner, DType dtype,
                       ActivationKind kind, MeasuredTensorStats* out);

// Resident set size of this process in bytes, from /proc/self/statm (0 if unreadable).
uint64_t ProcessRssBytes();

// ProcessRssBytes() as last read by any thread, read again only when that reading is older
// than max_age_seconds. A read is a system call of 2-11 us in a training loop on a VM (more
// when its path is cold): on a fast step a sizeable share of the monitor's cost, while a
// memory trend moves over many steps. A step longer than max_age_seconds still gets a
// reading of its own.
uint64_t RecentProcessRssBytes(double max_age_seconds);

// How long a step's mem/rss may hold an earlier reading (RecentProcessRssBytes).
inline constexpr double kStepRssMaxAgeSeconds = 0.01;

// The calling thread's minor page faults and kernel (system) CPU seconds so far, from
// getrusage(RUSAGE_THREAD); false where the system has no per-thread usage.
bool ThreadFaultsAndKernelSeconds(uint64_t* minor_faults, double* kernel_seconds);

// Calls row(offset) for the first element of every innermost row of a strided tensor
// (offsets and strides in elements), in row-major order; sizes must have no zero.
template <typename F>
void ForEachRow(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, F&& row) {
  std::vector<int64_t> index(sizes.size() > 1 ? sizes.size() - 1 : 0, 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * strides[d];
    row(offset);
    size_t d = index.size();
    while (d > 0 && ++index[d - 1] == sizes[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace trainscope::watch
