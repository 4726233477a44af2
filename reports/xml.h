// XML and HTML text escaping for the report writers (JUnit XML, the HTML page).
#pragma once

#include <string>

namespace mw::reports {

// `s` with &, <, >, " and ' escaped, and the control characters XML 1.0 forbids made spaces.
inline std::string xmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // XML 1.0 forbids most control characters.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          o += ' ';
        } else {
          o += c;
        }
    }
  }
  return o;
}

}  // namespace mw::reports
