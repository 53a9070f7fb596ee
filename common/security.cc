#include "common/security.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve and call over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate: peers must present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding a bearer token every call must carry (and this process sends)");

namespace pstrain {
namespace {

constexpr char kAuthKey[] = "authorization";

struct Config {
  std::string cert, key, ca;
  std::string bearer;  // "Bearer <token>", empty without a token
};

Config& Global() {
  static Config* config = new Config;
  return *config;
}

absl::Status ReadFile(const std::string& flag, const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot open"));
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("--", flag, "=", path, ": read error"));
  return absl::OkStatus();
}

class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthKey, Global().bearer});
    }
    methods->Proceed();
  }
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor;
  }
};

// Equal contents, in time that depends only on `want`'s length.
bool ConstantTimeEqual(grpc::string_ref got, const std::string& want) {
  unsigned char diff = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? static_cast<unsigned char>(got.data()[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

constexpr char kUnauthenticated[] = "missing or wrong bearer token (see --auth_token_file)";

bool TokenMatches(const grpc::string_ref& authorization) {
  return ConstantTimeEqual(authorization, Global().bearer);
}

// gRPC's auth metadata processor: the transport runs it on every call's
// metadata before the call reaches any method of any service, so a service
// added later cannot forget the check. A refused call never reaches a
// handler; its caller gets UNAUTHENTICATED.
void CheckToken(void* /*state*/, grpc_auth_context* /*context*/, const grpc_metadata* md,
                size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  bool ok = false;
  for (size_t i = 0; i < num_md && !ok; ++i) {
    if (grpc_slice_str_cmp(md[i].key, kAuthKey) != 0) continue;
    ok = TokenMatches(grpc::string_ref(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                                       GRPC_SLICE_LENGTH(md[i].value)));
  }
  done(user_data, nullptr, 0, nullptr, 0, ok ? GRPC_STATUS_OK : GRPC_STATUS_UNAUTHENTICATED,
       ok ? nullptr : kUnauthenticated);
}

// The server's credentials: plaintext or TLS as configured, with the token
// check above installed when a token is. (gRPC's C++ insecure credentials
// take no metadata processor, so the port is added through the core API,
// which does the same for both.)
class ServerCredentialsWithToken : public grpc::ServerCredentials {
 public:
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // Never called: the token check is this class' own.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = CoreCredentials();
    if (!Global().bearer.empty()) {
      grpc_server_credentials_set_auth_metadata_processor(creds, {CheckToken, nullptr, nullptr});
    }
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  static grpc_server_credentials* CoreCredentials() {
    const Config& c = Global();
    if (c.cert.empty()) return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {c.key.c_str(), c.cert.c_str()};
    return grpc_ssl_server_credentials_create_ex(
        c.ca.empty() ? nullptr : c.ca.c_str(), &pair, 1,
        c.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
  }
};

}  // namespace

absl::Status ConfigureSecurity(const SecurityFiles& files) {
  Config config;
  if (files.tls_cert.empty() != files.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!files.tls_ca.empty() && files.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls_ca needs --tls_cert and --tls_key (mutual TLS)");
  }
  if (!files.tls_cert.empty()) {
    if (absl::Status st = ReadFile("tls_cert", files.tls_cert, &config.cert); !st.ok()) return st;
    if (absl::Status st = ReadFile("tls_key", files.tls_key, &config.key); !st.ok()) return st;
  }
  if (!files.tls_ca.empty()) {
    if (absl::Status st = ReadFile("tls_ca", files.tls_ca, &config.ca); !st.ok()) return st;
  }
  if (!files.auth_token_file.empty()) {
    std::string token;
    if (absl::Status st = ReadFile("auth_token_file", files.auth_token_file, &token); !st.ok()) {
      return st;
    }
    token = std::string(absl::StripTrailingAsciiWhitespace(token));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file=", files.auth_token_file, ": the token is empty"));
    }
    config.bearer = absl::StrCat("Bearer ", token);
  }
  Global() = std::move(config);
  return absl::OkStatus();
}

absl::Status ConfigureSecurityFromFlags() {
  SecurityFiles files;
  files.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  files.tls_key = absl::GetFlag(FLAGS_tls_key);
  files.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  return ConfigureSecurity(files);
}

bool TlsEnabled() { return !Global().cert.empty(); }

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  const Config& c = Global();
  if (c.cert.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = c.ca;  // empty: the system's roots
  options.pem_private_key = c.key;
  options.pem_cert_chain = c.cert;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  return std::make_shared<ServerCredentialsWithToken>();
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!Global().bearer.empty()) out.push_back(std::make_unique<TokenInterceptorFactory>());
  return out;
}

bool IsLoopbackListen(const std::string& listen) {
  absl::string_view host = listen;
  const size_t colon = host.rfind(':');
  if (colon != absl::string_view::npos) host = host.substr(0, colon);
  absl::ConsumePrefix(&host, "[");
  absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

void WarnIfOpenWithoutToken(const std::string& listen) {
  // Mutual TLS (--tls_ca) admits only peers with a certificate of the CA.
  if (!Global().bearer.empty() || !Global().ca.empty() || IsLoopbackListen(listen)) return;
  spdlog::warn("listening on {} beyond loopback without --auth_token_file: anyone who reaches "
               "this port can stop the job, change its consistency and read or overwrite the "
               "weights (and read --metrics_port's status and metrics)",
               listen);
}

bool HttpAuthorized(const char* authorization, const char* token_param) {
  const std::string& want = Global().bearer;
  if (want.empty()) return true;
  if (authorization != nullptr && TokenMatches(authorization)) return true;
  return token_param != nullptr && ConstantTimeEqual(absl::StrCat("Bearer ", token_param), want);
}

}  // namespace pstrain
