// The scenario validator: turns the value tree given to scenario { ... } (harness/lua_value.h)
// into the Scenario model, collecting every error as "file:line: path: message". Its methods are
// defined in validator.cc (the scenario, worlds, roles, traffic, expectations) and
// validator_faults.cc (the timeline, fault modes and the nemesis).
#pragma once

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
  // field: "worlds.w1.heartbeet: ..." points at the line holding "heartbeet =".
  void error(const std::string& where, const std::string& msg);

  std::string refine(const std::string& where, const std::string& msg);

  // Reports every field of `t` not in `allowed` (tags excepted).
  void onlyFields(const LV& t, const std::string& where, const std::string& path,
                  std::initializer_list<const char*> allowed);

  std::optional<Ms> duration(const LV* v, const std::string& where, const std::string& path);

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
  std::optional<std::string> str(const LV* v, const std::string& where, const std::string& path);
  std::optional<double> num(const LV* v, const std::string& where, const std::string& path);
  std::optional<bool> boolean(const LV* v, const std::string& where, const std::string& path);

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
  // remove_world, add_world), validated against the scenario's roles and worlds.
  Fault roleFaultOf(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                    const Scenario& s);

  Fault failpoint(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                  const Scenario& s, const std::string& role);

  // A fault on simulated hosts (partition, heal, loss, bandwidth, delay).
  Fault network(FaultKind kind, const LV& act, const std::string& aw, const std::string& path,
                const Scenario& s);

  // A seeded random schedule of faults (the "nemesis", harness/nemesis.h), validated and drawn
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

  std::vector<std::string> errors;
  int check_ref = LUA_NOREF;

 private:
  std::string file_;
  const LoadOptions& opts_;
  std::vector<std::string> lines_;  // the file, read on the first error
};

}  // namespace mw::harness::loader
