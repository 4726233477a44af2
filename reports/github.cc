#include "reports/github.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace mw::reports {
namespace {

using harness::Outcome;
using harness::Report;
using harness::VerdictStatus;
using harness::verdictStatusName;

// Workflow-command escaping: the message loses its line breaks and percent signs to %-codes; a
// property value also its ':' and ','.
std::string escapeData(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\r') {
      out += "%0D";
    } else if (c == '\n') {
      out += "%0A";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escapeProperty(const std::string& s) {
  std::string out;
  for (char c : escapeData(s)) {
    if (c == ':') {
      out += "%3A";
    } else if (c == ',') {
      out += "%2C";
    } else {
      out += c;
    }
  }
  return out;
}

// "file.lua:12" -> {"file.lua", "12"}; a where without a line number keeps it all as the file.
std::pair<std::string, std::string> splitWhere(const std::string& where) {
  auto colon = where.rfind(':');
  if (colon == std::string::npos || colon + 1 == where.size()) return {where, ""};
  for (size_t i = colon + 1; i < where.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(where[i]))) return {where, ""};
  }
  return {where.substr(0, colon), where.substr(colon + 1)};
}

std::string annotation(const std::string& where, const std::string& fallback_file,
                       const std::string& title, const std::string& message,
                       const char* level = "error") {
  auto [file, line] = splitWhere(where);
  if (file.empty()) file = fallback_file;
  std::string out = std::string("::") + level + " file=" + escapeProperty(file);
  if (!line.empty()) out += ",line=" + line;
  return out + ",title=" + escapeProperty(title) + "::" + escapeData(message) + "\n";
}

// Markdown table cells: no line breaks, no unescaped pipes.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// The mark of a scenario's verdict in the summary table.
const char* markOf(VerdictStatus v) {
  switch (v) {
    case VerdictStatus::kPass:
      return "✅";
    case VerdictStatus::kSkipped:
      return "⏭️";
    case VerdictStatus::kInconclusive:
      return "❔";
    case VerdictStatus::kFail:
    case VerdictStatus::kError:
      break;
  }
  return "❌";
}

}  // namespace

std::string githubAnnotations(const Report& report) {
  const std::string& file = report.scenario.file;
  const std::string& name = report.scenario.name;
  std::string out;
  if (report.outcome == Outcome::kInterrupted || report.outcome == Outcome::kHarnessError) {
    // At the scenario file, no line: a report carries none for the scenario itself.
    out += annotation("", file, "mwchaos: " + name,
                      std::string("the run did not complete (") +
                          harness::outcomeName(report.outcome) + "): " + report.why);
  }
  for (const auto& e : report.verdicts) {
    const bool inconclusive = e.status == VerdictStatus::kInconclusive;
    if (e.status != VerdictStatus::kFail && e.status != VerdictStatus::kError && !inconclusive)
      continue;
    // An inconclusive verdict is a warning: the run could not tell, it did not see a failure.
    out += annotation(e.where, file, "mwchaos: " + name + ": " + e.name,
                      std::string(verdictStatusName(e.status)) + ": " + e.message,
                      inconclusive ? "warning" : "error");
  }
  return out;
}

std::string githubSummary(const std::vector<Report>& reports) {
  std::string out = "### mwchaos: fault-isolation verdicts\n\n";
  out += "| verdict | scenario | file | expectations |\n|---|---|---|---|\n";
  std::string details;
  for (const auto& r : reports) {
    const std::string& name = r.scenario.name;
    int passed = 0, total = 0;
    for (const auto& e : r.verdicts) {
      ++total;
      if (e.status == VerdictStatus::kPass || e.status == VerdictStatus::kSkipped) {
        ++passed;
        continue;
      }
      details += "| " + cell(name) + " | " + cell(e.name) + " | " +
                 cell(verdictStatusName(e.status)) + " | " + cell(e.measured) + " | " +
                 cell(e.threshold) + " | " + cell(e.message) + " |\n";
    }
    const VerdictStatus verdict = r.verdict();
    out += "| " + std::string(markOf(verdict)) + " " + cell(verdictStatusName(verdict)) + " | " +
           cell(name) + " | `" + cell(r.scenario.file) + "` | " + std::to_string(passed) + "/" +
           std::to_string(total) + " |\n";
  }
  if (!details.empty()) {
    out += "\n#### Expectations that did not pass\n\n";
    out += "| scenario | expectation | status | measured | threshold | what happened |\n";
    out += "|---|---|---|---|---|---|\n" + details;
  }
  return out + "\n";
}

bool writeAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool appendGithubSummary(const std::vector<Report>& reports, std::string* error) {
  const char* path = std::getenv("GITHUB_STEP_SUMMARY");
  if (path == nullptr || *path == '\0') {
    *error = "GITHUB_STEP_SUMMARY is not set (it is, in a GitHub Actions step)";
    return false;
  }
  const std::string text = githubSummary(reports);
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && writeAll(fd, text);
  if (!ok) *error = std::string("cannot append to ") + path + ": " + std::strerror(errno);
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    *error = std::string("cannot append to ") + path + ": " + std::strerror(errno);
    ok = false;
  }
  return ok;
}

}  // namespace mw::reports
