// Strict JSON reading (duplicate keys, depth, size), the lines of keys for messages,
// UTF-8 repair, and Field, the typed view that names the file and the field in errors.
#include "json_util.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace adagrouper {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("{}: is a directory", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path.string()));
  std::string text;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > 0) {  // one allocation of the right size
    text.resize(static_cast<std::size_t>(size));
    in.seekg(0, std::ios::beg);
    in.read(text.data(), static_cast<std::streamsize>(size));
    if (in.gcount() != static_cast<std::streamsize>(size))
      throw InputError(fmt::format("{}: cannot read file", path.string()));
    return text;
  }
  in.clear();  // a pipe or a device: no size to ask for
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot read file", path.string()));
  return std::move(buf).str();
}

namespace {

// What made the strict parser stop.
enum class Problem { none, syntax, duplicate, depth };

// Builds the document like nlohmann's own parser, but stops at a key that its object
// already has and at a container nested deeper than kMaxJsonDepth.
class StrictSax {
 public:
  using json = nlohmann::json;
  explicit StrictSax(json& root) : root_(root) {}

  bool null() { return add(json(nullptr)); }
  bool boolean(bool v) { return add(json(v)); }
  bool number_integer(json::number_integer_t v) { return add(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return add(json(v)); }
  bool string(std::string& v) { return add(json(std::move(v))); }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& top = frames_.back();
    if (top.node->contains(k)) {
      problem_ = Problem::duplicate;
      key_ = std::move(k);
      return false;
    }
    slot_ = &(*top.node)[k];
    top.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    problem_ = Problem::syntax;
    position_ = position;
    what_ = e.what();
    return false;
  }

  Problem problem() const { return problem_; }
  const std::string& key() const { return key_; }
  std::size_t position() const { return position_; }
  const std::string& what() const { return what_; }

  // The path of the innermost open container, as Field names it.
  std::string path() const {
    std::string out;
    for (std::size_t i = 1; i < frames_.size(); ++i) {
      const Frame& parent = frames_[i - 1];
      if (parent.node->is_array()) {
        out += fmt::format("[{}]", parent.node->size() - 1);
      } else {
        out += out.empty() ? parent.key : "." + parent.key;
      }
    }
    return out;
  }

 private:
  struct Frame {
    json* node;
    std::string key;  // of an object: the key whose value is being read
  };

  json* place(json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *frames_.back().node;
    if (top.is_array()) {
      top.get_ref<json::array_t&>().push_back(std::move(v));
      return &top.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool add(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    if (frames_.size() >= kMaxJsonDepth) {
      problem_ = Problem::depth;
      return false;
    }
    frames_.push_back({place(std::move(v)), {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }

  json& root_;
  std::vector<Frame> frames_;
  json* slot_ = nullptr;
  Problem problem_ = Problem::none;
  std::string key_, what_;
  std::size_t position_ = 0;
};

// A key of an object, or an object or array that opens, as walk_json meets it.
struct JsonMark {
  bool is_key = false;
  std::string_view path;  // of the object that holds the key, or of the container that opens
  std::string_view key;
  std::size_t line = 0;
  std::size_t depth = 0;  // containers around the mark
};

// Reads the string that starts at text[pos] (a '"'), decoding the simple escapes; pos
// ends after the closing quote.
std::string read_string(std::string_view text, std::size_t& pos) {
  std::string out;
  for (++pos; pos < text.size() && text[pos] != '"'; ++pos) {
    if (text[pos] != '\\' || pos + 1 >= text.size()) {
      out += text[pos];
      continue;
    }
    const char e = text[++pos];
    constexpr std::string_view kFrom = "bfnrt", kTo = "\b\f\n\r\t";
    const auto at = kFrom.find(e);
    if (e == 'u') out += '\\';
    out += at == std::string_view::npos ? e : kTo[at];
  }
  ++pos;
  return out;
}

// Walks the structure of a JSON text, valid up to where the walk stops, calling
// stop(mark) at every key and every opening container in text order until it returns
// true; returns that mark's line, or 0. Iterative: the depth costs no stack.
template <class Stop>
std::size_t walk_json(std::string_view text, std::size_t first_line, Stop&& stop) {
  struct Frame {
    bool array;
    std::size_t index, path_len;
  };
  std::vector<Frame> frames;
  std::string path, key;
  bool want_key = false;
  std::size_t line = first_line;
  for (std::size_t pos = 0; pos < text.size();) {
    const char c = text[pos];
    if (c == '"') {
      std::string s = read_string(text, pos);
      if (!frames.empty() && !frames.back().array && want_key) {
        if (stop(JsonMark{true, path, s, line, frames.size()})) return line;
        key = std::move(s);
        want_key = false;
      }
      continue;
    }
    ++pos;
    if (c == '\n') {
      ++line;
    } else if (c == '{' || c == '[') {
      const std::size_t len = path.size();
      if (!frames.empty()) path += frames.back().array ? fmt::format("[{}]", frames.back().index)
                                                       : (path.empty() ? key : "." + key);
      if (stop(JsonMark{false, path, {}, line, frames.size()})) return line;
      frames.push_back({c == '[', 0, len});
      want_key = c == '{';
    } else if (c == '}' || c == ']') {
      if (frames.empty()) return 0;
      path.resize(frames.back().path_len);
      frames.pop_back();
    } else if (c == ',' && !frames.empty()) {
      if (frames.back().array) ++frames.back().index; else want_key = true;
    }
  }
  return 0;
}

// A rough upper bound of the memory the parsed document takes: per value, per
// container and per key.
double parsed_bytes(std::string_view text) {
  std::size_t commas = 0, opens = 0, colons = 0;
  for (const char c : text) {
    commas += c == ',';
    opens += c == '[' || c == '{';
    colons += c == ':';
  }
  return 16.0 * static_cast<double>(commas + opens + 1) + 40.0 * static_cast<double>(opens) +
         64.0 * static_cast<double>(colons);
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1 << 30)); }

// The library's message without its "[json.exception...] parse error at ...: " prefix.
std::string library_detail(const std::string& what) {
  auto colon = what.find(": ", what.find("parse error"));
  if (what.find("parse error") != std::string::npos && colon != std::string::npos) return what.substr(colon + 2);
  const auto bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

[[noreturn]] void fail_parse(const StrictSax& sax, std::string_view text, const std::string& source,
                             std::size_t first_line) {
  if (sax.problem() == Problem::depth) {
    const std::size_t line = walk_json(text, first_line, [](const JsonMark& m) { return !m.is_key && m.depth >= kMaxJsonDepth; });
    throw InputError(fmt::format("{}: line {}: nested more than {} levels", source, line, kMaxJsonDepth));
  }
  if (sax.problem() == Problem::duplicate) {
    const std::string path = sax.path();
    int seen = 0;
    const std::size_t line = walk_json(text, first_line, [&](const JsonMark& m) {
      return m.is_key && m.path == path && m.key == sax.key() && ++seen == 2;
    });
    throw InputError(fmt::format("{}: {}{}{}duplicate key \"{}\" (a key may appear once in an object)", source,
                                 line ? fmt::format("line {}: ", line) : "", path, path.empty() ? "" : ": ",
                                 sax.key()));
  }
  // The library counts the bytes it read; the error is at the last one.
  std::size_t line = first_line, col = 1;
  const std::size_t end = std::min(sax.position() == 0 ? 0 : sax.position() - 1, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    col = text[i] == '\n' ? 1 : col + 1;
    line += text[i] == '\n';
  }
  throw InputError(
      fmt::format("{}: line {}, column {}: invalid JSON: {}", source, line, col, library_detail(sax.what())));
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& source, std::size_t first_line) {
  const double need = parsed_bytes(text);
  if (need > kMaxJsonBytes)
    throw InputError(fmt::format("{}: reading these {:.0f} MiB of JSON would take about {} of memory, more than the {} "
                                 "one JSON input may take (give long traces as CSV)",
                                 source, static_cast<double>(text.size()) / (1 << 20), gib(need), gib(kMaxJsonBytes)));
  nlohmann::json doc;
  StrictSax sax(doc);
  if (!nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &sax) || sax.problem() != Problem::none)
    fail_parse(sax, text, source, first_line);
  return doc;
}

nlohmann::json read_json_file(const fs::path& path) { return parse_json_text(read_text_file(path), path.string()); }

std::size_t json_key_line(const std::string& file, std::string_view path, std::string_view key) {
  std::error_code ec;
  if (file.empty() || !fs::is_regular_file(file, ec)) return 0;
  std::string text;
  try {
    text = read_text_file(file);
  } catch (const InputError&) {
    return 0;
  }
  return walk_json(text, 1, [&](const JsonMark& m) { return m.is_key && m.path == path && m.key == key; });
}

namespace {

// The length of the UTF-8 sequence at s[i], or 0 when none starts there (a stray or
// truncated byte, an overlong form, a surrogate, a code point above U+10FFFF).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = byte(i);
  if (c < 0x80) return 1;
  const std::size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  unsigned cp = c & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  constexpr std::array<unsigned, 5> kLeast{0, 0, 0x80, 0x800, 0x10000};
  if (cp < kLeast[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

}  // namespace

std::string utf8_safe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_length(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the optimal string alignment table: i - 2, i - 1 and i.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

// Appends v to out as dump() writes it, until out holds `budget` characters; below
// `depth` levels a container is "[...]" (a level costs a character, so a depth of
// `budget` changes nothing within the budget).
void describe_into(const nlohmann::json& v, std::string& out, std::size_t budget, int depth) {
  if (out.size() >= budget) return;
  if (!v.is_structured()) {
    out += v.is_string() ? nlohmann::json(utf8_safe(v.get_ref<const std::string&>())).dump() : v.dump();
    return;
  }
  const bool object = v.is_object();
  out += object ? '{' : '[';
  if (depth <= 0 && !v.empty()) out += "...";
  bool first = true;
  for (auto it = v.begin(); depth > 0 && it != v.end() && out.size() < budget; ++it) {
    out += first ? "" : ",";
    first = false;
    if (object) out += nlohmann::json(utf8_safe(it.key())).dump() + ":";
    describe_into(*it, out, budget, depth - 1);
  }
  out += object ? '}' : ']';
}

}  // namespace

std::string describe_json(const nlohmann::json& value) {
  std::string s;
  describe_into(value, s, 40, 40);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Field::Field(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

void Field::fail(std::string_view what) const {
  if (path_.empty()) throw InputError(fmt::format("{}: {}", file_, what));
  throw InputError(fmt::format("{}: {}: {}", file_, path_, what));
}

void Field::check_keys(std::span<const std::string_view> known, std::string_view what) const {
  require_object();
  for (const auto& item : value_->items()) {
    const std::string& key = item.key();
    if (key == "description" || key == "comment" || std::find(known.begin(), known.end(), key) != known.end())
      continue;
    std::string_view nearest;
    std::size_t best = 3;
    for (const std::string_view k : known)
      if (const std::size_t d = edit_distance(key, k); d < best) {
        best = d;
        nearest = k;
      }
    std::string names;
    for (const std::string_view k : known) names += fmt::format("{}{}", names.empty() ? "" : ", ", k);
    const std::string hint =
        nearest.empty() ? fmt::format("known keys: {}", names) : fmt::format("did you mean \"{}\"?", nearest);
    const std::size_t line = json_key_line(file_, path_, key);
    throw InputError(fmt::format("{}: {}{}{}unknown key \"{}\"{}{} ({})", file_,
                                 line ? fmt::format("line {}: ", line) : "", path_, path_.empty() ? "" : ": ",
                                 utf8_safe(key), what.empty() ? "" : " for ", what, hint));
  }
}

namespace {

// "a, b, c" as a list.
std::vector<std::string_view> key_list(std::string_view keys) {
  std::vector<std::string_view> out;
  while (!keys.empty()) {
    const std::size_t comma = keys.find(", ");
    out.push_back(keys.substr(0, comma));
    if (comma == std::string_view::npos) break;
    keys.remove_prefix(comma + 2);
  }
  return out;
}

}  // namespace

void Field::check_key_list(std::string_view keys, std::string_view what) const { check_keys(key_list(keys), what); }

void check_schema(const Field& root, std::span<const ObjectKeys> schema, std::string_view what) {
  struct Node {
    const nlohmann::json* value;
    std::string path, shape;  // as Field names it, and with "[]" for the indices
  };
  std::vector<Node> stack{{&root.json(), root.path(), ""}};  // the depth costs no recursion
  while (!stack.empty()) {
    Node n = std::move(stack.back());
    stack.pop_back();
    if (n.value->is_object()) {
      for (const ObjectKeys& o : schema)
        if (o.path == n.shape) Field(*n.value, root.file(), n.path).check_key_list(o.keys, what);
      for (const auto& item : n.value->items())
        if (item.value().is_structured())
          stack.push_back({&item.value(), n.path.empty() ? item.key() : n.path + "." + item.key(),
                          n.shape.empty() ? item.key() : n.shape + "." + item.key()});
    } else if (n.value->is_array()) {
      for (std::size_t i = 0; i < n.value->size(); ++i)
        if ((*n.value)[i].is_structured())
          stack.push_back({&(*n.value)[i], fmt::format("{}[{}]", n.path, i), n.shape + "[]"});
    }
  }
}

bool Field::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

Field Field::at(std::string_view key) const {
  require_object();
  std::string sub = path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  auto it = value_->find(key);
  if (it == value_->end()) throw InputError(fmt::format("{}: {}: missing field", file_, sub));
  return Field(*it, file_, std::move(sub)).plain_rates(plain_rates_);
}

Field Field::at(std::size_t index) const {
  require_array();
  if (index >= value_->size()) fail(fmt::format("has no element {}", index));
  return Field((*value_)[index], file_, fmt::format("{}[{}]", path_, index)).plain_rates(plain_rates_);
}

Field Field::plain_rates(std::string_view why) const {
  Field f = *this;
  f.plain_rates_ = why;
  return f;
}

std::size_t Field::size() const {
  require_array();
  return value_->size();
}

void Field::require_object() const {
  if (!value_->is_object()) fail(fmt::format("must be an object, got {}", describe_json(*value_)));
}

void Field::require_array() const {
  if (!value_->is_array()) fail(fmt::format("must be an array, got {}", describe_json(*value_)));
}

double Field::number() const {
  if (!value_->is_number()) fail(fmt::format("must be a number, got {}", describe_json(*value_)));
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("must be a finite number");
  return v;
}

double Field::quantity(Quantity q) const {
  if (!value_->is_string()) {
    if (!value_->is_number())
      fail(fmt::format("must be a number of {} or a string with a {} unit (\"{}\"), got {}", base_unit_name(q),
                       quantity_name(q), unit_example(q), describe_json(*value_)));
    return number();
  }
  const std::string& text = value_->get_ref<const std::string&>();
  try {
    const double v = parse_quantity(text, q);
    if (!has_unit(text))
      fail(fmt::format("must be a number (in {}) or a string with a unit (\"{}{}\"), got {}", base_unit_name(q),
                       text, base_unit_symbol(q), describe_json(*value_)));
    if (q == Quantity::rate && !plain_rates_.empty())
      fail(fmt::format("must be a plain number ({}), got {}", plain_rates_, describe_json(*value_)));
    return v;
  } catch (const QuantityError& e) {
    fail(utf8_safe(e.what()));
  }
}

std::string Field::got(double v) const {
  if (value_->is_string()) return fmt::format("{} ({})", describe_json(*value_), v);
  return fmt::format("{}", v);
}

double Field::non_negative(std::optional<Quantity> q) const {
  const double v = q ? quantity(*q) : number();
  if (!(v >= 0)) fail(fmt::format("must be >= 0, got {}", got(v)));
  return v;
}

double Field::positive(std::optional<Quantity> q) const {
  const double v = q ? quantity(*q) : number();
  if (!(v > 0)) fail(fmt::format("must be > 0, got {}", got(v)));
  return v;
}

double Field::in_range(double v, double min, double max, std::string_view why) const {
  if (v < min) fail(fmt::format("must be >= {}, got {}", min, got(v)));
  if (v > max) fail(fmt::format("must be <= {}{}{}, got {}", max, why.empty() ? "" : ", ", why, got(v)));
  return v;
}

double Field::number_in(double min, double max, std::string_view why) const {
  return in_range(number(), min, max, why);
}

double Field::number_in(Quantity q, double min, double max, std::string_view why) const {
  return in_range(quantity(q), min, max, why);
}

std::int64_t Field::integer() const {
  if (value_->is_number_unsigned() &&
      value_->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fail(fmt::format("must be an integer of at most {}, got {}", std::numeric_limits<std::int64_t>::max(),
                     value_->dump()));
  if (value_->is_number_integer()) return value_->get<std::int64_t>();
  if (value_->is_number_float()) {
    double v = value_->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15)
      return static_cast<std::int64_t>(v);
  }
  fail(fmt::format("must be an integer, got {}", describe_json(*value_)));
}

std::int64_t Field::integer_at_least(std::int64_t min) const {
  std::int64_t v = integer();
  if (v < min) fail(fmt::format("must be >= {}, got {}", min, v));
  return v;
}

int Field::int_in(int min, int max) const {
  const std::int64_t v = integer_at_least(min);
  if (v > max) fail(fmt::format("must be <= {}, got {}", max, v));
  return static_cast<int>(v);
}

std::string Field::string() const {
  if (!value_->is_string()) fail(fmt::format("must be a string, got {}", describe_json(*value_)));
  return value_->get<std::string>();
}

bool Field::boolean() const {
  if (!value_->is_boolean()) fail(fmt::format("must be true or false, got {}", describe_json(*value_)));
  return value_->get<bool>();
}

double Field::non_negative_or(std::string_view key, double fallback) const {
  return has(key) ? at(key).non_negative() : fallback;
}

}  // namespace adagrouper
