#include "model/net_words.h"

#include <algorithm>
#include <cctype>

namespace mw::harness {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

bool plain(std::string_view w, std::string_view extra) {
  return std::all_of(w.begin(), w.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

}  // namespace

bool isInterfaceName(std::string_view dev) {
  return !dev.empty() && dev.size() <= 15 && plain(dev, "_.-") && dev != "." && dev != ".." &&
         dev[0] != '-';
}

bool isTcRate(std::string_view rate) {
  size_t i = 0;
  while (i < rate.size() && isDigit(rate[i])) ++i;
  if (i == 0) return false;
  if (i < rate.size() && rate[i] == '.') {
    const size_t frac = ++i;
    while (i < rate.size() && isDigit(rate[i])) ++i;
    if (i == frac) return false;
  }
  const std::string_view unit = rate.substr(i);
  if (unit == "%") return true;
  return std::all_of(unit.begin(), unit.end(),
                     [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
}

bool isPeerWord(std::string_view peer) { return !peer.empty() && plain(peer, "_.:%[]-/"); }

}  // namespace mw::harness
