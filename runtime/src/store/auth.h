// Store authentication: a challenge-response over HMAC-SHA256 (OpenSSL's libcrypto), so the token
// never travels and each side proves it holds the token.
//
//   client -> HELLO {version, client_nonce}
//   server -> CHALLENGE {server_nonce, server_proof}        (a store with a token)
//   client -> AUTH {client_proof}                            (after checking server_proof)
//   server -> OK, or ERROR permission_denied
//
//   server_proof = HMAC-SHA256(token, "mw-store-server" || client_nonce || server_nonce)
//   client_proof = HMAC-SHA256(token, "mw-store-client" || client_nonce || server_nonce)
//
// Fresh nonces on both sides make a recorded exchange useless on another connection, and the
// distinct labels keep one side's proof from serving as the other's. A store without a token
// answers HELLO with OK; a client that holds a token refuses such a store (it cannot prove that it
// knows the token). docs/store-protocol.md is the reference.
//
// Thread rules: every function is thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "multiworld/status.h"

namespace mw::store::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // SHA-256

// `n` bytes from the operating system's generator (RAND_bytes). kUnavailable if it fails.
Result<std::string> randomBytes(size_t n);

// The proof a server (or client) gives for the two nonces under `token`.
std::string serverProof(std::string_view token, std::string_view client_nonce,
                        std::string_view server_nonce);
std::string clientProof(std::string_view token, std::string_view client_nonce,
                        std::string_view server_nonce);

// True when `a` and `b` are equal; the time taken does not depend on where they differ (it
// depends on the lengths only, which are public here: proofs are always kProofBytes).
bool equalProofs(std::string_view a, std::string_view b);

}  // namespace mw::store::auth
