// The CLI's route for the library's log messages (kvt_set_log_callback): to stderr, one
// line each, prefixed "kvtier: warning: " and so on, from WARN up unless KVTIER_LOG says
// otherwise. The library itself never writes to stderr; the CLI, as its user, does.
// Call once at startup, before any other thread exists.
#ifndef KVTIER_TOOLS_KVTIER_CLI_LOG_H_
#define KVTIER_TOOLS_KVTIER_CLI_LOG_H_

namespace kvtier::cli {

// KVTIER_LOG=debug|info|warn|error|off picks the lowest level shown (default warn).
void InstallStderrLog();

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_CLI_LOG_H_
