#include "common/security.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

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
  const Config& c = Global();
  if (c.cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      c.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = c.ca;
  options.pem_key_cert_pairs.push_back({c.key, c.cert});
  return grpc::SslServerCredentials(options);
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
TokenInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!Global().bearer.empty()) out.push_back(std::make_unique<TokenInterceptorFactory>());
  return out;
}

grpc::Status Authenticate(const grpc::ServerContextBase& ctx) {
  const std::string& want = Global().bearer;
  if (want.empty()) return grpc::Status::OK;
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kAuthKey);
  if (it == metadata.end() || !ConstantTimeEqual(it->second, want)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong bearer token (see --auth_token_file)");
  }
  return grpc::Status::OK;
}

bool HttpAuthorized(const char* authorization, const char* token_param) {
  const std::string& want = Global().bearer;
  if (want.empty()) return true;
  if (authorization != nullptr && ConstantTimeEqual(authorization, want)) return true;
  return token_param != nullptr && ConstantTimeEqual(absl::StrCat("Bearer ", token_param), want);
}

}  // namespace pstrain
