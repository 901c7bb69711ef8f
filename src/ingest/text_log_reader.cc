#include "ingest/text_log_reader.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/tag.h"
#include "ingest/parse_util.h"
#include "ingest/text_log_tokens.h"

namespace trainscope::ingest {

namespace {

using namespace text_log;  // the tokenizer (text_log_tokens.h)

class TextLogParser {
 public:
  TextLogParser(const std::string& name, SampleSink* sink, ImportStats* stats) : name_(name), sink_(sink), stats_(stats) {}

  void Line(std::string_view raw, uint64_t line_number) {
    line_number_ = line_number;
    raw = StripAnsi(raw, &ansi_buffer_);
    // A progress bar redraws itself with '\r'; a metrics line may follow it on the same
    // physical line. Each segment is a line of its own.
    if (raw.find('\r') != std::string_view::npos) {
      const std::string whole(raw);
      size_t start = 0;
      while (start <= whole.size()) {
        size_t end = whole.find('\r', start);
        if (end == std::string::npos) end = whole.size();
        if (end > start) Segment(std::string_view(whole).substr(start, end - start));
        start = end + 1;
      }
      return;
    }
    Segment(raw);
  }

  void Segment(std::string_view raw) {
    bool has_time = false;
    double t = wall_time_;
    std::string_view s = StripPrefix(raw, &t, &has_time);
    if (has_time) wall_time_ = t;
    if (s.empty()) return;
    const std::string family = Dispatch(s);
    if (!family.empty()) ++families_[family];
  }

  const std::map<std::string, uint64_t>& families() const { return families_; }
  uint64_t points() const { return points_; }

  // The family one line would be parsed as, without emitting anything.
  static std::string Classify(std::string_view raw) {
    ImportStats stats;
    RunData sink;
    TextLogParser p("", &sink, &stats);
    p.Line(raw, 1);
    return p.families_.empty() ? "" : p.families_.begin()->first;
  }

 private:
  // event: each line is an occurrence (an overflow skip), never a repeat of another.
  void Emit(const std::string& tag, int64_t step, double value, bool event = false) {
    auto last = last_point_.find(tag);
    if (last == last_point_.end()) {
      if (!ValidateTag(tag).ok()) {
        ++stats_->damaged;
        return;
      }
      last = last_point_.emplace(tag, std::pair<int64_t, double>{step, std::nan("")}).first;
    } else if (!event && last->second.first == step && (last->second.second == value ||
                                              (std::isnan(value) && std::isnan(last->second.second)))) {
      // The same record printed again (each rank of a job prints it): kept once.
      ++repeated_;
      return;
    }
    last->second = {step, value};
    sink_->OnScalar(tag, step, wall_time_, value);
    ++stats_->scalars;
    ++points_;
  }

  void SetStep(int64_t step) {
    step_ = step;
    has_step_ = true;
    overflow_since_ = 0;
  }

  std::string Dispatch(std::string_view s) {
    if (s.find("OVERFLOW!") != std::string_view::npos) return Overflow(s) ? "deepspeed" : "";
    if (s.find("gradient overflow detected") != std::string_view::npos) return Overflow(s) ? "fairseq" : "";
    if (s.find("%|") != std::string_view::npos) return "";  // a tqdm progress bar ("Upload: 100%|####| 3/3")
    if (StartsWith(s, "Traceback (most recent call last)")) {
      in_traceback_ = true;
      return "";
    }
    if (in_traceback_ && Exception(s)) return "";
    if (StartsWith(s, "Namespace(") || StartsWith(s, "cmd =")) {
      if (args_.empty()) {
        args_ = std::string(s.substr(0, 64 << 10));
        if (IsValidUtf8(args_)) sink_->OnMeta("args", args_);
      }
      return "";
    }
    if (StartsWith(s, "iteration") && s.find('|') != std::string_view::npos) return Megatron(s) ? "megatron" : "";
    if (s.front() == '|' && (s.find("epoch") != std::string_view::npos || s.find("End of training") != std::string_view::npos))
      return PytorchTable(s) ? "pytorch_examples" : "";
    if ((StartsWith(s, "iter ") || StartsWith(s, "step ")) && s.find(':') != std::string_view::npos) {
      if (NanoGpt(s)) return "nanogpt";
    }
    if (s.back() == '}') {
      // A printed dict, alone or after a logger's prefix ("INFO | ... - {'loss': 1.2}").
      const size_t py = s.find("{'");
      const size_t js = s.find("{\"");
      if (py != std::string_view::npos && (js == std::string_view::npos || py < js)) {
        if (HfDict(s.substr(py))) return "hf_dict";
      } else if (js != std::string_view::npos) {
        if (JsonDict(s.substr(js))) return "fairseq";
      }
      if (s.front() == '{') return "";
    }
    if (s.find("step=") != std::string_view::npos || s.find("global_step=") != std::string_view::npos) {
      if (KeyValues(s, /*deepspeed=*/true)) return "deepspeed";
    }
    return KeyValues(s, false) ? "kv" : "";
  }

  // The line that ends a Python traceback: "torch.cuda.OutOfMemoryError: CUDA out of
  // memory. ...", "KeyboardInterrupt". Kept as meta "exception" (the last one), as a
  // recorded run that crashed keeps its exception.
  bool Exception(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && (IsAlpha(s[n]) || IsDigit(s[n]) || s[n] == '_' || s[n] == '.')) ++n;
    const std::string_view type = s.substr(0, n);
    if (n == 0 || !IsAlpha(type.front())) return false;
    const bool named = type.size() >= 5 && (type.find("Error") != std::string_view::npos ||
                                            type.find("Exception") != std::string_view::npos ||
                                            type.find("Interrupt") != std::string_view::npos || type.find("Exit") != std::string_view::npos);
    if (!named || (n < s.size() && s[n] != ':')) return false;
    std::string text(s.substr(0, 500));
    if (IsValidUtf8(text)) sink_->OnMeta("exception", text);
    in_traceback_ = false;
    return true;
  }

  bool Overflow(std::string_view s) {
    ++overflow_since_;
    const int64_t step = AddSat(step_, overflow_since_);
    Emit(tags::kAmpOverflowSkip, step, 1.0, /*event=*/true);
    double scale;
    std::string unit;
    size_t at = s.find("reducing to ");
    const size_t arrow = s.find("->");
    const size_t set_to = s.find("loss scale to:");
    if (set_to != std::string_view::npos) {  // fairseq: "setting loss scale to: 64.0"
      std::string_view v = Trim(s.substr(set_to + 14));
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if (arrow != std::string_view::npos && at == std::string_view::npos) {  // "Scale value A -> B"
      std::string_view v = Trim(s.substr(arrow + 2));
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if (at != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,."));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    } else if ((at = s.find("loss scale: ")) != std::string_view::npos) {
      std::string_view v = s.substr(at + 12);
      v = v.substr(0, v.find_first_of(" ,"));
      if (ParseNumber(v, &scale)) Emit(tags::kAmpLossScale, step, scale, /*event=*/true);
    }
    return true;
  }

  bool Megatron(std::string_view s) {
    const std::vector<std::string_view> parts = SplitTop(s, '|');
    std::string_view first = Trim(parts[0]).substr(9);  // after "iteration"
    first = first.substr(0, first.find('/'));
    int64_t step;
    if (!ParseStep(first, &step)) return false;
    SetStep(step);
    for (size_t i = 1; i < parts.size(); ++i) {
      Pair p;
      if (ParsePair(parts[i], false, &p)) Emit(p.key, step, p.value);
    }
    return true;
  }

  bool PytorchTable(std::string_view s) {
    const std::vector<std::string_view> parts = SplitTop(s, '|');
    std::vector<Pair> pairs;
    int kind = 0;  // 1 batch row, 2 end of epoch, 3 end of training
    int64_t batch = -1;
    for (std::string_view part : parts) {
      part = Trim(part);
      if (part.empty()) continue;
      int64_t n;
      if (StartsWith(part, "end of epoch") && ParseStep(part.substr(12), &n)) {
        epoch_ = n;
        kind = 2;
      } else if (StartsWith(part, "End of training")) {
        kind = 3;
      } else if (StartsWith(part, "epoch") && ParseStep(part.substr(5), &n)) {
        epoch_ = n;
        kind = 1;
      } else if (part.find("batches") != std::string_view::npos && part.find('/') != std::string_view::npos) {
        const size_t slash = part.find('/');
        int64_t total;
        std::string_view tot = Trim(part.substr(slash + 1));
        tot = tot.substr(0, tot.find(' '));
        if (ParseStep(part.substr(0, slash), &batch) && ParseStep(tot, &total)) batches_per_epoch_ = total;
      } else {
        Pair p;
        if (ParsePair(part, true, &p)) pairs.push_back(std::move(p));
      }
    }
    if (kind == 0) return false;
    int64_t step = step_;
    if (kind == 1 && batch >= 0) step = AddSat(MulSat(AddSat(epoch_, -1), batches_per_epoch_), batch);
    if (kind == 2) step = batches_per_epoch_ > 0 ? MulSat(epoch_, batches_per_epoch_) : epoch_;
    if (kind != 3) SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool NanoGpt(std::string_view s) {
    const size_t colon = s.find(':');
    int64_t step;
    if (!ParseStep(s.substr(4, colon - 4), &step)) return false;
    std::vector<Pair> pairs;
    for (std::string_view part : SplitTop(s.substr(colon + 1), ',')) {
      Pair p;
      if (ParsePair(part, true, &p, /*unit_words=*/true)) pairs.push_back(std::move(p));
    }
    if (pairs.empty()) return false;
    SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  // A JSON object printed by a logger: fairseq's json log format, where numbers are JSON
  // strings ("loss": "9.276"). The step is num_updates (or valid_/train_num_updates),
  // step, iteration or global_step; else the last step seen.
  bool JsonDict(std::string_view s) {
    nlohmann::json obj = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (!obj.is_object()) return false;
    std::vector<Pair> pairs;
    bool has_step = false;
    int64_t step = step_;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      double v;
      if (it->is_number()) {
        v = it->get<double>();
      } else if (it->is_string()) {
        if (!ParseNumber(it->get_ref<const std::string&>(), &v)) continue;
      } else {
        continue;
      }
      const std::string& key = it.key();
      const bool updates = key == "num_updates" || (key.size() > 12 && key.compare(key.size() - 12, 12, "_num_updates") == 0);
      if ((updates || IsStepKey(key)) && std::isfinite(v) && std::fabs(v) < 9e18) {
        if (!has_step || updates) step = static_cast<int64_t>(v);
        has_step = true;
        continue;
      }
      if (ValidateTag(key).ok()) pairs.push_back({key, v});
    }
    if (pairs.empty()) return false;
    if (has_step) SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool HfDict(std::string_view s) {
    std::vector<Pair> pairs;
    bool has_step = false, is_eval = false;
    int64_t step = 0;
    for (std::string_view part : SplitTop(s.substr(1, s.size() - 2), ',')) {
      part = Trim(part);
      if (part.size() < 3 || part.front() != '\'') continue;
      const size_t close = part.find('\'', 1);
      if (close == std::string_view::npos) continue;
      std::string_view key = part.substr(1, close - 1);
      std::string_view rest = Trim(part.substr(close + 1));
      if (rest.empty() || rest.front() != ':') continue;
      std::string_view value = Trim(rest.substr(1));
      if (StartsWith(value, "tensor(")) value = value.substr(7, value.find_first_of(",)") - 7);
      double v;
      if (!ParseNumber(value, &v)) continue;
      if (key == "step") {
        has_step = ParseStep(value, &step);
        continue;
      }
      if (StartsWith(key, "eval_")) is_eval = true;
      if (ValidateTag(key).ok()) pairs.push_back({std::string(key), v});
    }
    if (pairs.empty()) return false;
    if (!has_step) {
      if (!is_eval) ++dict_index_;
      step = dict_index_;
    }
    SetStep(step);
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    return true;
  }

  bool KeyValues(std::string_view s, bool deepspeed) {
    char sep = ',';
    if (s.find('|') != std::string_view::npos) sep = '|';
    else if (s.find(',') == std::string_view::npos && s.find(';') != std::string_view::npos) sep = ';';
    std::vector<Pair> pairs;
    bool step_found = false, epoch_found = false;
    int64_t step = 0;
    double epoch = 0;
    std::vector<std::string_view> parts = SplitTop(s, sep);
    if (parts.size() == 1 && std::count(s.begin(), s.end(), '=') > 1 && s.find('/') == std::string_view::npos) {
      parts = SplitTop(s, ' ');  // "loss=1.2 acc=0.5 lr=0.001"
    }
    for (std::string_view part : parts) {
      // "epoch=0/micro_step=10/global_step=10": several pairs joined by '/'.
      std::vector<std::string_view> sub{part};
      if (std::count(part.begin(), part.end(), '=') > 1) sub = SplitTop(part, '/');
      for (std::string_view piece : sub) {
        Pair p;
        if (!ParsePair(piece, false, &p)) continue;
        if (IsStepKey(p.key) && std::isfinite(p.value) && std::fabs(p.value) < 9e18) {
          // global_step outranks a micro step or a plain step on the same line.
          if (!step_found || p.key == "global_step") step = static_cast<int64_t>(p.value);
          step_found = true;
          continue;
        }
        if (p.key == "micro_step") continue;
        if (p.key == "epoch") {
          epoch_found = true;
          epoch = p.value;
        }
        pairs.push_back(std::move(p));
      }
    }
    // Fewer than two pairs by separators: try word pairs over the whole line (a comma
    // inside "tps: 1,234" is no separator).
    if (pairs.size() + (step_found ? 1 : 0) < 2) {
      bool word_step = false;
      int64_t wstep = 0;
      std::vector<Pair> words = ScanWordPairs(s, &word_step, &wstep);
      if (words.size() + (word_step ? 1 : 0) >= 2 && words.size() + (word_step ? 1 : 0) > pairs.size() + (step_found ? 1 : 0)) {
        pairs = std::move(words);
        step_found = word_step;
        step = wstep;
        // llm.c's compact "s:N trl:X" lines: its own family, so the role map can name trl/tel.
        if (StartsWith(s, "s:")) compact_llmc_ = true;
      }
    }
    if (pairs.empty() && !step_found) return false;
    if (!deepspeed && !step_found && pairs.size() == 1 && sep == ',' && s.size() > 200) return false;  // prose
    if (step_found) {
      SetStep(step);
    } else if (!has_step_) {
      // No step anywhere yet: number the records.
      step = ++record_index_;
      (void)epoch_found;
      (void)epoch;
    } else {
      step = step_;
    }
    for (const Pair& p : pairs) Emit(p.key, step, p.value);
    if (compact_llmc_ && StartsWith(s, "s:")) llmc_lines_++;
    return true;
  }

  const std::string& name_;
  SampleSink* sink_;
  ImportStats* stats_;
  uint64_t line_number_ = 0;
  double wall_time_ = 0;
  int64_t step_ = 0;
  bool has_step_ = false;
  int64_t overflow_since_ = 0;
  int64_t epoch_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t dict_index_ = 0;
  int64_t record_index_ = 0;
  uint64_t points_ = 0;
  std::string args_;
  std::map<std::string, uint64_t> families_;
  std::unordered_map<std::string, std::pair<int64_t, double>> last_point_;  // per tag: the last (step, value)
  std::string ansi_buffer_;
  uint64_t repeated_ = 0;
  bool compact_llmc_ = false;
  bool in_traceback_ = false;

 public:
  uint64_t repeated() const { return repeated_; }
  uint64_t llmc_lines() const { return llmc_lines_; }

 private:
  uint64_t llmc_lines_ = 0;
};

}  // namespace

std::string TextLineFamily(std::string_view line) { return TextLogParser::Classify(line); }

Status ReadTextLogLines(LineReader& lines, SampleSink* sink, ImportStats* stats) {
  stats->format = "text_log";
  sink->OnMeta("format", "text_log");
  TextLogParser parser(lines.name(), sink, stats);
  std::string_view line;
  for (;;) {
    const LineReader::Result r = lines.Next(&line);
    if (r == LineReader::kEnd) break;
    if (r == LineReader::kError) {
      stats->bytes += lines.bytes_read();
      const Status failed = lines.ErrorStatus();
      return failed.WithMessage(failed.message() + (parser.points() ? "; the " + std::to_string(parser.points()) +
                                                                          " points before it were kept"
                                                                    : std::string()));
    }
    if (r == LineReader::kTooLong) {
      ++stats->damaged;
      stats->Warn(lines.error());
      continue;
    }
    ++stats->records;
    parser.Line(line, lines.line_number());
  }
  stats->bytes += lines.bytes_read();
  std::string family;
  uint64_t best = 0;
  for (const auto& [f, n] : parser.families()) {
    if (n > best || (n == best && f != "kv")) {
      best = n;
      family = f;
    }
  }
  if (parser.points() == 0) {
    return Status::Corruption(lines.name() + ": no training metrics recognised in " + std::to_string(stats->records) +
                         " lines (expected Megatron-LM, nanoGPT, DeepSpeed, PyTorch-examples, Hugging Face or "
                         "key: value / key=value lines)");
  }
  // llm.c prints trl/tel/norm (train loss, val loss, grad norm): a family of its own,
  // and a sub-format ("text_log/llmc") the role map names those series for.
  if (parser.llmc_lines() * 2 > stats->records) {
    family = "llmc";
    stats->format = "text_log/llmc";
  }
  if (parser.repeated() > 0) {
    stats->Warn(lines.name() + ": " + std::to_string(parser.repeated()) +
                " values repeated at the same step with the same value (a record printed twice, e.g. by each rank, or a "
                "field two records share); kept once");
  }
  sink->OnMeta("log_family", family);
  return Status::Ok();
}

Status ReadTextLog(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress) {
  std::unique_ptr<LineReader> lines;
  Status s = LineReader::Open(path, &lines);
  if (!s.ok()) return s;
  lines->SetProgress(progress);
  return ReadTextLogLines(*lines, sink, stats);
}

Status ReadTextLogBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats) {
  LineReader lines(text, name);
  return ReadTextLogLines(lines, sink, stats);
}

}  // namespace trainscope::ingest
