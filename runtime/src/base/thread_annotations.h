// Thread-safety annotations: lock rules that clang checks at compile time (-Wthread-safety,
// https://clang.llvm.org/docs/ThreadSafetyAnalysis.html). Under another compiler they expand to
// nothing, so they cost nothing and change no code.
//
// What they say:
//   MW_CAPABILITY("mutex")     on a class: its objects are locks (mw::Mutex, mutex.h).
//   MW_SCOPED_CAPABILITY       on a class: an RAII guard that holds a lock for its lifetime
//                              (mw::MutexLock).
//   MW_GUARDED_BY(mu)          on a member: read or written only with `mu` held.
//   MW_PT_GUARDED_BY(mu)       on a pointer member: what it points to only with `mu` held (the
//                              pointer itself is not guarded).
//   MW_REQUIRES(mu...)         on a function: callers hold `mu` (the `*Locked` methods).
//   MW_EXCLUDES(mu...)         on a function: callers do not hold `mu` (the function takes it).
//   MW_ACQUIRE(mu...)          on a function: it returns with `mu` held (no argument: `this`).
//   MW_RELEASE(mu...)          on a function: it returns with `mu` released (no argument: `this`).
//   MW_TRY_ACQUIRE(ok, mu...)  on a function: it holds `mu` when it returns `ok`.
//   MW_ASSERT_HELD(mu)         on a function: it returns only if `mu` is held (a run-time check).
//   MW_NO_THREAD_SAFETY_ANALYSIS  on a function: not checked. For the few places the analysis
//                              cannot follow (a lock held across a callback); say why beside it.
//
// The analysis is local to each function: it trusts a function's annotations at its call sites and
// checks its body against them. It knows nothing of std::mutex (libstdc++ does not annotate it), so
// an annotated member must be guarded by an mw::Mutex and locked through mw::MutexLock.
#pragma once

#if defined(__clang__)
#define MW_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define MW_THREAD_ANNOTATION_(x)
#endif

#define MW_CAPABILITY(name) MW_THREAD_ANNOTATION_(capability(name))
#define MW_SCOPED_CAPABILITY MW_THREAD_ANNOTATION_(scoped_lockable)
#define MW_GUARDED_BY(mu) MW_THREAD_ANNOTATION_(guarded_by(mu))
#define MW_PT_GUARDED_BY(mu) MW_THREAD_ANNOTATION_(pt_guarded_by(mu))
#define MW_REQUIRES(...) MW_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define MW_EXCLUDES(...) MW_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define MW_ACQUIRE(...) MW_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define MW_RELEASE(...) MW_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define MW_TRY_ACQUIRE(...) MW_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define MW_ASSERT_HELD(mu) MW_THREAD_ANNOTATION_(assert_capability(mu))
#define MW_NO_THREAD_SAFETY_ANALYSIS MW_THREAD_ANNOTATION_(no_thread_safety_analysis)
