// Lua 5.4's pattern matcher, rewritten to count its steps. Every loop and recursion of a match
// goes through step(), which raises the budget's error and every kPollEvery steps lets the poll
// stop the call. Lua errors longjmp over the frames here, so nothing on them needs a destructor.
#include "harness/lua_matcher.h"

#include <cctype>
#include <cstring>
#include <lua.hpp>

namespace mw::harness {

namespace {

constexpr char kEsc = '%';
constexpr ptrdiff_t kOpen = -1;  // a capture's length while it is open
constexpr ptrdiff_t kPosition = PatternMatcher::kPosition;

unsigned char byte(char c) { return static_cast<unsigned char>(c); }

// Whether `c` is in the class %cls (a letter: its class, upper case its complement; else cls
// itself).
bool inClass(unsigned char c, unsigned char cls) {
  int in = 0;
  // clang-format off
  switch (std::tolower(cls)) {
    case 'a': in = std::isalpha(c); break;
    case 'c': in = std::iscntrl(c); break;
    case 'd': in = std::isdigit(c); break;
    case 'g': in = std::isgraph(c); break;
    case 'l': in = std::islower(c); break;
    case 'p': in = std::ispunct(c); break;
    case 's': in = std::isspace(c); break;
    case 'u': in = std::isupper(c); break;
    case 'w': in = std::isalnum(c); break;
    case 'x': in = std::isxdigit(c); break;
    case 'z': in = c == 0; break;  // deprecated since Lua 5.2, still there in 5.4
    default: return cls == c;
  }
  // clang-format on
  return std::isupper(cls) ? in == 0 : in != 0;
}

// Whether `c` is in the set that opens at `p` ('[') and closes at `close` (']').
bool inSet(unsigned char c, const char* p, const char* close) {
  bool hit = true;  // what finding c means: false in a complemented set
  if (*++p == '^') {
    hit = false;
    ++p;
  }
  for (; p < close; ++p) {
    if (*p == kEsc) {
      if (inClass(c, byte(*++p))) return hit;
    } else if (p + 2 < close && p[1] == '-') {
      if (byte(p[0]) <= c && c <= byte(p[2])) return hit;
      p += 2;
    } else if (byte(*p) == c) {
      return hit;
    }
  }
  return !hit;
}

}  // namespace

const char* PatternMatcher::matchAt(const char* s, const char* p) {
  level_ = 0;
  depth_ = kMaxDepth;
  return match(s, p);
}

ptrdiff_t PatternMatcher::capture(int i, const char* s, const char* e, const char** at) {
  if (i >= level_) {
    if (i != 0) luaL_error(L_, "invalid capture index %%%d", i + 1);
    *at = s;
    return e - s;
  }
  if (caps_[i].len == kOpen) luaL_error(L_, "unfinished capture");
  *at = caps_[i].init;
  if (caps_[i].len == kPosition) lua_pushinteger(L_, caps_[i].init - src_ + 1);
  return caps_[i].len;
}

void PatternMatcher::pushCapture(int i, const char* s, const char* e) {
  const char* at = nullptr;
  const ptrdiff_t len = capture(i, s, e, &at);
  if (len != kPosition) lua_pushlstring(L_, at, static_cast<size_t>(len));
}

int PatternMatcher::pushCaptures(const char* s, const char* e) {
  const int n = level_ == 0 && s != nullptr ? 1 : level_;
  luaL_checkstack(L_, n, "too many captures");
  for (int i = 0; i < n; ++i) pushCapture(i, s, e);
  return n;
}

void PatternMatcher::check() {
  if (steps_ > limits_.max_steps) {
    luaL_error(L_, "string.%s: pattern matching exceeded its budget of %I steps", fn_,
               static_cast<lua_Integer>(limits_.max_steps));
  }
  next_check_ = steps_ + kPollEvery;
  if (next_check_ > limits_.max_steps) next_check_ = limits_.max_steps + 1;
  if (limits_.poll != nullptr) limits_.poll(L_);
}

const char* PatternMatcher::match(const char* s, const char* p) {
  if (depth_-- == 0) luaL_error(L_, "pattern too complex");
  step();
  s = items(s, p);
  ++depth_;
  return s;
}

// The items from `p` on, at `s`. Items that leave no choice to come back to are taken in this
// loop; a capture or a repetition recurses, and what it returns is the answer.
const char* PatternMatcher::items(const char* s, const char* p) {
  while (p != p_end_) {
    step();
    switch (*p) {
      case '(':
        if (p + 1 < p_end_ && p[1] == ')') return openCapture(s, p + 2, kPosition);
        return openCapture(s, p + 1, kOpen);
      case ')':
        return closeCapture(s, p + 1);
      case '$':
        if (p + 1 == p_end_) return s == end_ ? s : nullptr;
        break;  // not at the end: an ordinary character
      case kEsc: {
        const Item item = escape(s, p);
        if (item == Item::kFailed) return nullptr;
        if (item == Item::kTaken) continue;
        break;
      }
      default:
        break;
    }
    const char* ep = classEnd(p);
    const char q = ep < p_end_ ? *ep : '\0';  // the quantifier, if any
    if (!single(s, p, ep)) {
      if (q != '*' && q != '?' && q != '-') return nullptr;
      p = ep + 1;  // none of it is fine
      continue;
    }
    switch (q) {
      case '?':
        if (const char* r = match(s + 1, ep + 1)) return r;
        p = ep + 1;
        continue;
      case '+':
        return longest(s + 1, p, ep);
      case '*':
        return longest(s, p, ep);
      case '-':
        return shortest(s, p, ep);
      default:
        ++s;
        p = ep;
    }
  }
  return s;
}

// %b, %f or a back-reference at p: taken (s and p moved past it), failed, or none of these
// (an ordinary class such as %a).
PatternMatcher::Item PatternMatcher::escape(const char*& s, const char*& p) {
  if (p + 1 == p_end_) return Item::kOrdinary;  // classEnd says what is wrong
  if (p[1] == 'b') {
    s = balanced(s, p + 2);
    p += 4;
  } else if (p[1] == 'f') {
    p = frontier(s, p + 2);
    if (p == nullptr) return Item::kFailed;
  } else if (std::isdigit(byte(p[1]))) {
    s = backReference(s, p[1]);
    p += 2;
  } else {
    return Item::kOrdinary;
  }
  return s == nullptr ? Item::kFailed : Item::kTaken;
}

// The end of the single-character class that starts at p.
const char* PatternMatcher::classEnd(const char* p) {
  const char c = *p++;
  if (c == kEsc) {
    if (p == p_end_) luaL_error(L_, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c != '[') return p;
  if (p < p_end_ && *p == '^') ++p;
  do {  // the first character is in the set even when it is ']'
    if (p == p_end_) luaL_error(L_, "malformed pattern (missing ']')");
    if (*p++ == kEsc && p < p_end_) ++p;
  } while (p == p_end_ || *p != ']');
  return p + 1;
}

// Whether the subject character at s is in the class [p, ep).
bool PatternMatcher::single(const char* s, const char* p, const char* ep) const {
  if (s >= end_) return false;
  const unsigned char c = byte(*s);
  switch (*p) {
    case '.':
      return true;
    case kEsc:
      return inClass(c, byte(p[1]));
    case '[':
      return inSet(c, p, ep - 1);
    default:
      return byte(*p) == c;
  }
}

// Class [p, ep) repeated as often as it matches from s, then fewer times, until the rest does.
const char* PatternMatcher::longest(const char* s, const char* p, const char* ep) {
  ptrdiff_t n = 0;
  while (single(s + n, p, ep)) {
    step();
    ++n;
  }
  for (; n >= 0; --n) {
    if (const char* r = match(s + n, ep + 1)) return r;
  }
  return nullptr;
}

// Class [p, ep) repeated as few times as the rest allows.
const char* PatternMatcher::shortest(const char* s, const char* p, const char* ep) {
  for (;; ++s) {
    if (const char* r = match(s, ep + 1)) return r;
    if (!single(s, p, ep)) return nullptr;
  }
}

const char* PatternMatcher::openCapture(const char* s, const char* p, ptrdiff_t what) {
  if (level_ >= kMaxCaptures) luaL_error(L_, "too many captures");
  caps_[level_++] = {s, what};
  const char* r = match(s, p);
  if (r == nullptr) --level_;
  return r;
}

const char* PatternMatcher::closeCapture(const char* s, const char* p) {
  int i = level_ - 1;
  while (i >= 0 && caps_[i].len != kOpen) --i;
  if (i < 0) luaL_error(L_, "invalid pattern capture");
  caps_[i].len = s - caps_[i].init;
  const char* r = match(s, p);
  if (r == nullptr) caps_[i].len = kOpen;
  return r;
}

// %bxy at s, with p at x: the end of the balanced text, or nullptr.
const char* PatternMatcher::balanced(const char* s, const char* p) {
  if (p + 1 >= p_end_) luaL_error(L_, "malformed pattern (missing arguments to '%%b')");
  if (s >= end_ || *s != p[0]) return nullptr;
  ptrdiff_t open = 1;
  for (const char* t = s + 1; t < end_; ++t) {
    if (*t == p[1]) {
      if (--open == 0) {
        step(static_cast<uint64_t>(t - s));
        return t + 1;
      }
    } else if (*t == p[0]) {
      ++open;
    }
  }
  step(static_cast<uint64_t>(end_ - s));
  return nullptr;
}

// %f[set] at s, with p at '[': the pattern after the set when s is where the set begins.
const char* PatternMatcher::frontier(const char* s, const char* p) {
  if (p == p_end_ || *p != '[') luaL_error(L_, "missing '[' after '%%f' in pattern");
  const char* ep = classEnd(p);
  const unsigned char before = s == src_ ? '\0' : byte(s[-1]);
  const unsigned char at = s < end_ ? byte(*s) : '\0';
  return !inSet(before, p, ep - 1) && inSet(at, p, ep - 1) ? ep : nullptr;
}

// %1 to %9 at s: the end of the same text as that capture's, or nullptr.
const char* PatternMatcher::backReference(const char* s, char digit) {
  const int i = digit - '1';
  if (i < 0 || i >= level_ || caps_[i].len == kOpen) {
    luaL_error(L_, "invalid capture index %%%d", i + 1);
  }
  const auto len = static_cast<size_t>(caps_[i].len);  // a position's never matches
  if (static_cast<size_t>(end_ - s) < len) return nullptr;
  step(len);
  return std::memcmp(caps_[i].init, s, len) == 0 ? s + len : nullptr;
}

}  // namespace mw::harness
