// The subcommands of mw_bench. Each parses its own flags from argv[first..], prints a table, writes
// its JSON document to --json PATH, and returns the exit code (0 ran; 1 a target was missed and
// --strict was given). Errors throw BenchError (exit 3) or UsageError (exit 2).
#pragma once

namespace mwb {

int runThroughput(int argc, char** argv, int first);
int runTwoWorlds(int argc, char** argv, int first);
int runDetection(int argc, char** argv, int first);
int runCreation(int argc, char** argv, int first);
int runLatency(int argc, char** argv, int first);   // diagnostic, no targets
int runOverhead(int argc, char** argv, int first);  // diagnostic, no targets
int runStarvation(int argc, char** argv, int first);
int runStoreAttack(int argc, char** argv, int first);
int runTelemetry(int argc, char** argv, int first);
int runNccl(int argc, char** argv, int first);  // built with the NCCL backend only

extern const char* const kThroughputHelp;
extern const char* const kTwoWorldsHelp;
extern const char* const kDetectionHelp;
extern const char* const kCreationHelp;
extern const char* const kLatencyHelp;
extern const char* const kOverheadHelp;
extern const char* const kStarvationHelp;
extern const char* const kStoreAttackHelp;
extern const char* const kTelemetryHelp;
extern const char* const kNcclHelp;

}  // namespace mwb
