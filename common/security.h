// Who may talk to a pstrain daemon, and how: TLS on every channel
// (--tls_cert, --tls_key, --tls_ca; mutual TLS when a CA is given) and a
// bearer token (--auth_token_file) that every call carries and every method
// of every service checks. Process-wide: configured once at start-up, then
// read by MakeChannel, MakeBulkChannel and StartServer (common/rpc.h).
#ifndef PSTRAIN_COMMON_SECURITY_H_
#define PSTRAIN_COMMON_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_interceptor.h"

namespace pstrain {

struct SecurityFiles {
  std::string tls_cert;  // PEM certificate chain of this process
  std::string tls_key;   // its PEM private key
  std::string tls_ca;    // PEM CA: peers must present certificates it signed
  std::string auth_token_file;
};

// Reads the files (NOT_FOUND / INVALID_ARGUMENT naming the file or flag on
// a problem) and makes them the process' security. Call before any channel
// or server exists.
absl::Status ConfigureSecurity(const SecurityFiles& files);
// The same from --tls_cert, --tls_key, --tls_ca and --auth_token_file.
absl::Status ConfigureSecurityFromFlags();

bool TlsEnabled();
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();
// The credentials every server listens with (StartServer, common/rpc.h).
// With a token, they check it on every call before any method runs, whatever
// the service: a call without it, or with another, ends UNAUTHENTICATED.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials();
// Client interceptors that add "authorization: Bearer <token>" to every
// call (none without a token).
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors();

// True for a --listen address on the loopback interface ("127.0.0.1:5000",
// "localhost:0", "[::1]:5000"); false for any other, "0.0.0.0" and ":5000"
// included.
bool IsLoopbackListen(const std::string& listen);
// Logs a warning when `listen` is beyond loopback and neither a token nor
// mutual TLS is configured: the default lets anyone who reaches the port
// control the job.
void WarnIfOpenWithoutToken(const std::string& listen);

// The token check for the HTTP endpoints (/metrics, the dashboard): true when
// no token is configured, or `authorization` is "Bearer <token>", or
// `token_param` (a ?token= query parameter, for a browser) is the token.
bool HttpAuthorized(const char* authorization, const char* token_param);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_SECURITY_H_
