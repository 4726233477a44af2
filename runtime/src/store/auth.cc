#include "store/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "multiworld/store.h"

namespace mw::store::auth {
namespace {

std::string proof(std::string_view label, std::string_view token, std::string_view client_nonce,
                  std::string_view server_nonce) {
  std::string message;
  message.reserve(label.size() + client_nonce.size() + server_nonce.size());
  message.append(label).append(client_nonce).append(server_nonce);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // An empty token is a key of zero bytes: HMAC() takes a non-null key pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : token.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &length) == nullptr) {
    return {};  // never equal to a real proof (equalProofs compares lengths too)
  }
  return std::string(reinterpret_cast<const char*>(out), length);
}

}  // namespace

Result<std::string> randomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return Status(Code::kUnavailable, "the random generator (OpenSSL RAND_bytes) failed");
  }
  return out;
}

std::string serverProof(std::string_view token, std::string_view client_nonce,
                        std::string_view server_nonce) {
  return proof("mw-store-server", token, client_nonce, server_nonce);
}

std::string clientProof(std::string_view token, std::string_view client_nonce,
                        std::string_view server_nonce) {
  return proof("mw-store-client", token, client_nonce, server_nonce);
}

bool equalProofs(std::string_view a, std::string_view b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace mw::store::auth

namespace mw {

Result<std::string> randomStoreToken() {
  auto bytes = store::auth::randomBytes(32);
  if (!bytes.ok()) return bytes.status();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : *bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace mw
