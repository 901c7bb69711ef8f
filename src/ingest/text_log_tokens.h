// The text-log tokenizer: what a line of a framework's printed log is made of, before any
// family's rules map it onto series. Prefixes (timestamps, [bracketed] groups, ANSI colour
// codes), top-level splitting, "key: value" pairs with units, compact "key:value" runs, and
// the step arithmetic those need.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::ingest::text_log {

inline bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Strips a leading timestamp and [bracketed] groups; returns the rest.
std::string_view StripPrefix(std::string_view line, double* wall_time, bool* has_time);

// Splits at top-level separators (not inside [] or () or quotes).
std::vector<std::string_view> SplitTop(std::string_view s, char sep);

struct Pair {
  std::string key;
  double value;
};

// "key: value" or "key=value" (or, when allow_space, "key value" with the value last).
bool ParsePair(std::string_view part, bool allow_space, Pair* out, bool unit_words = false);

// Step arithmetic on numbers read from a file: saturate instead of overflowing.
int64_t AddSat(int64_t a, int64_t b);
int64_t MulSat(int64_t a, int64_t b);

bool IsStepKey(std::string_view k);

// Removes ANSI escape sequences (colour codes of loguru, rich, tqdm): ESC [ ... final byte,
// and ESC followed by one character.
std::string_view StripAnsi(std::string_view line, std::string* buffer);

// Compact "key:value key:value" or "key: value  key: value" pairs separated by whitespace
// (llm.c "s:0 trl:11.0091 lr:0.000001 norm:15.37", modded-nanoGPT "step:0/4400
// val_loss:10.8258 train_time:0ms", torchtitan "step:  1  loss: 12.25  memory: 34.5GiB").
// Keys are single words here; a step key's value may be "N/M". Returns the pairs found.
std::vector<Pair> ScanWordPairs(std::string_view s, bool* has_step, int64_t* step);

}  // namespace trainscope::ingest::text_log
