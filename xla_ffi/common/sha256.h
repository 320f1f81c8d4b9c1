// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for names and handshakes derived from
// the job's secret without revealing it. Not constant-time beyond what the algorithm is;
// compare digests with digests_equal, which is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace accl {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);
std::string hex(const Digest& digest, size_t bytes = 32);  // the first `bytes`, lower case
bool digests_equal(const Digest& a, const Digest& b);      // in time independent of content

}  // namespace accl
