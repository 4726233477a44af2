// The scenario validator: turns the value tree given to scenario { ... } (harness/lua_value.h)
// into the Scenario model, collecting every error as "file:line: path: message". Its methods are
// defined in validator.cc (the scenario, worlds, roles, traffic, expectations) and
// validator_faults.cc (the timeline, fault modes and the nemesis).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "harness/loader.h"
#include "harness/lua_value.h"

namespace mw::harness::loader {

class Validator {
 public:
  Validator(std::string file, const LoadOptions& opts) : file_(std::move(file)), opts_(opts) {}

  // Records "where: msg". Lua tables keep no line numbers, so for a field of a table, `where` (the
  // line its constructor was called at) is refined to the first line from there on that names the
  // field: "worlds.w1.heartbeet: ..." points at the line holding "heartbeet =". A NUL byte of the
  // scenario's text in `msg` is written as \0.
  void error(const std::string& where, const std::string& msg);

  std::string refine(const std::string& where, const std::string& msg);

  // Reports every field of `t` not in `allowed` (tags excepted).
  void onlyFields(const LV& t, const std::string& where, const std::string& path,
                  std::initializer_list<const char*> allowed);

  // The range checks: every number a scenario gives goes through duration() (a time, by the time
  // parser, model/scenario.h) or number() (anything else), with the ranges of model/scenario.h.

  // The time `v` gives (a number of seconds, or a string like "500ms") when it lies in [lo, hi].
  // nullopt when `v` is null (no error), and when it is malformed, NaN, infinite, negative or out
  // of the range (an error naming `path` and the range: `worlds.w1.heartbeat: "1e15s" is out of
  // range (50 ms to 1 h)`). REQUIRES: Ms(0) <= lo <= hi <= kMaxTime.
  std::optional<Ms> duration(const LV* v, const std::string& where, const std::string& path,
                             Ms lo = Ms(0), Ms hi = kMaxTime);

  // The number `v` gives when it lies in [lo, hi]. nullopt when `v` is null (no error), and when
  // it is not a number, or NaN, or out of the range (an error naming `path` and the range, with
  // `unit` after it when given: "traffic[1].rate: nan is out of range (0 to 1000000 operations
  // per second)").
  std::optional<double> number(const LV* v, const std::string& where, const std::string& path,
                               double lo, double hi, const std::string& unit = "");
  // The same for a whole number: a fraction is an error too. REQUIRES: |lo|, |hi| <= 2^53.
  std::optional<int64_t> whole(const LV* v, const std::string& where, const std::string& path,
                               int64_t lo, int64_t hi);

  // Whether `text` (a string of the scenario's) holds no NUL byte. A NUL is an error naming
  // `path`: the C strings that names, arguments, environment and paths become would end at it.
  bool noNul(const std::string& text, const std::string& where, const std::string& path);

  // The value of `v` when it has type `t` (nullopt, and an error naming `expected`, otherwise).
  template <typename R>
  std::optional<R> typed(const LV* v, LV::T t, R (*get)(const LV&), const char* expected,
                         const std::string& where, const std::string& path) {
    if (v == nullptr) return std::nullopt;
    if (v->t != t) {
      error(where, path + ": expected " + expected + ", got " + v->show());
      return std::nullopt;
    }
    return get(*v);
  }
  // The string `v` gives; nullopt when `v` is null (no error), not a string, or a string holding
  // a NUL byte (an error naming `path`).
  std::optional<std::string> str(const LV* v, const std::string& where, const std::string& path);
  std::optional<bool> boolean(const LV* v, const std::string& where, const std::string& path);

  // A list of strings (or one string), each as str() gives it; empty when `v` is null.
  std::vector<std::string> strList(const LV* v, const std::string& where, const std::string& path);

  Scenario scenario(const LV& t);

  void worlds(const LV* v, const std::string& w, Scenario& s);

  void roles(const LV* v, const std::string& w, Scenario& s);

  // A role's program, env and cwd fields as written (docs/scenarios.md, "Program roles").
  void program(const LV& spec, const std::string& w, const std::string& path, RoleSpec& r);

  // Program roles once the worlds' sizes are known: the working directory exists, the program is
  // an executable file (resolved into RoleSpec::executable), and every placeholder is known.
  void programs(Scenario& s);

  // Each world's members: ranks 0..n-1, each exactly once.
  void sizes(Scenario& s);

  // Simulated hosts are all or nothing: a role on loopback cannot reach one in a namespace.
  void hostsAllOrNone(const Scenario& s);

  void traffic(const LV* v, const std::string& w, Scenario& s);

  void timeline(const LV* v, const std::string& w, Scenario& s);

  // A fault on a role's process (kill, pause, resume, restart, failpoint, clear_failpoint,
  // remove_world, add_world, scancel_step), validated against the scenario's roles and worlds.
  Fault roleFaultOf(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                    const Scenario& s);

  // The action's "signal" as written (a number becomes its digits), or `fallback` when absent.
  std::string signalText(const LV& act, const std::string& aw, const std::string& path,
                         const std::string& fallback);
  // scancel_step: an ending signal when one is named; the role has a host, and no other role.
  ScancelStep scancelStep(const LV& act, const std::string& aw, const std::string& path,
                          const Scenario& s, const std::string& role);

  Fault failpoint(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                  const Scenario& s, const std::string& role);

  // A fault on simulated hosts (partition, heal, loss, bandwidth, delay).
  Fault network(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                const Scenario& s);

  // A seeded random schedule of faults (the "nemesis", model/nemesis.h), validated and drawn
  // here so that the planned timeline is known before the run.
  void nemesis(const LV* v, const std::string& w, Scenario& s);

  // "{backend}" in a point name becomes the backend of the world the point names (or of the
  // role's first world); an NCCL error asked of a Gloo world becomes its Gloo equivalent.
  void expandBackend(const Scenario& s, const std::string& role, std::string& point,
                     FailMode& mode);

  // mode.errno by name: its number, or nullopt (and an error when it is there but unknown).
  // `name` receives the name as written.
  std::optional<int> errnoField(const LV& m, const std::string& aw, const std::string& path,
                                std::string* name);

  void probabilityAndOnce(const LV& m, const std::string& aw, const std::string& path, FailMode& f);

  void failMode(const LV* m, const std::string& aw, const std::string& path, FailMode& f);

  // A POSIX point fails its call with a pinned errno (libfiu's failinfo), never a random one.
  void posixMode(const LV* m, const std::string& aw, const std::string& path,
                 const std::string& point, FailMode& f);

  void expect(const LV* v, const std::string& w, Scenario& s);
  // expect.data_intact: true (the default), or { off = "why" }, which turns the verdict off.
  void dataIntact(const LV* v, const std::string& w, ExpectSpec& e);

  std::vector<std::string> errors;
  int check_ref = LUA_NOREF;

 private:
  std::string file_;
  const LoadOptions& opts_;
  std::vector<std::string> lines_;  // the file, read on the first error
};

}  // namespace mw::harness::loader
