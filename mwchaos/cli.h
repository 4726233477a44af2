// The mwchaos command line: its options, usage text and exit codes (mwchaos --help).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/loader.h"

namespace mw::harness {

inline constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2, kExitUnavailable = 3,
                     kExitInconclusive = 4;
inline constexpr int kExitInterrupted = 130;

// The most operations --history may keep per role (a report of 1000000 operations per role is
// about 60 MB of JSON per role).
inline constexpr int64_t kMaxHistory = 1000000;

struct Cli {
  std::string command;
  std::vector<std::string> paths;
  std::string out;
  LoadOptions load;
  std::set<std::string> formats = {"json", "junit", "html"};
  int verbosity = 1;
  std::string worker;
  int rerun_inconclusive = 0;  // --rerun-inconclusive
  int64_t history = 0;         // --history: operations per role in the report; 0: none
  std::string hosts;           // --hosts: the inventory file (docs/hosts.md); "": none
};

// The --help text, with the defaults of the Lua limits filled in.
std::string usage();

// Parses argv into `cli`. Returns -1 to go on, or the exit code to end with (after printing the
// usage error, or the help for --help).
int parseCli(int argc, char** argv, Cli& cli);

// Prints "mwchaos: <why>" and the hint to --help on stderr; returns kExitUsage.
int usageError(const std::string& why);

// Scenario files named by `paths`: files as given, folders expanded to their *.lua files, sorted.
// nullopt (after printing why) when a path does not exist or a folder holds no .lua file.
std::optional<std::vector<std::string>> scenarioFiles(const std::vector<std::string>& paths);

// Combines two exit codes: the first of 2, 1, 4, 3, 0 that either is.
int combineExit(int a, int b);

}  // namespace mw::harness
