#include "transport/handshake.h"

#include <sys/random.h>

#include <cerrno>
#include <random>

#include "transport/tcp.h"

namespace accl {

Status check_hello(const Hello& h) {
  if (h.magic != kHandshakeMagic) return error(Code::kAborted, "not a jax_accl connection");
  if (h.version != kProtocolVersion) {
    return error(Code::kAborted, "protocol version ", h.version, ", expected ", kProtocolVersion);
  }
  if (!valid_rail_weight(h.weight)) {
    return error(Code::kAborted, "rail weight ", h.weight, " is not a positive finite number");
  }
  return Status::Ok();
}

Digest handshake_proof(const std::string& secret, const char* role, const Hello& hello,
                       const uint8_t* acceptor_nonce) {
  std::string message = str_cat("jax_accl ", role);
  message.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
  message.append(reinterpret_cast<const char*>(acceptor_nonce), kNonceBytes);
  return hmac_sha256(secret, message);
}

void random_bytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = getrandom(p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // no getrandom (kernels before 3.17): the library's device, /dev/urandom
      std::random_device device;
      for (; bytes > 0; --bytes) *p++ = static_cast<uint8_t>(device());
      return;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

Status handshake_as_connector(int fd, const std::string& secret, Hello hello,
                              const Deadline& deadline) {
  random_bytes(hello.nonce, kNonceBytes);
  Challenge challenge;
  ACCL_RETURN_IF_ERROR(write_all(fd, &hello, sizeof(hello), deadline));
  ACCL_RETURN_IF_ERROR(read_all(fd, &challenge, sizeof(challenge), deadline));
  if (!digests_equal(challenge.proof,
                     handshake_proof(secret, "acceptor", hello, challenge.nonce))) {
    return error(Code::kAborted, "the listener does not know the job's secret");
  }
  const Digest response = handshake_proof(secret, "connector", hello, challenge.nonce);
  ACCL_RETURN_IF_ERROR(write_all(fd, response.data(), response.size(), deadline));
  char ack = 0;
  ACCL_RETURN_IF_ERROR(read_all(fd, &ack, 1, deadline));
  if (ack != kHandshakeAccepted) return error(Code::kAborted, "handshake refused");
  return Status::Ok();
}

Status handshake_as_acceptor(int fd, const std::string& secret, Hello* hello,
                             const Deadline& deadline) {
  ACCL_RETURN_IF_ERROR(read_all(fd, hello, sizeof(*hello), deadline));
  ACCL_RETURN_IF_ERROR(check_hello(*hello));
  Challenge challenge;
  random_bytes(challenge.nonce, kNonceBytes);
  challenge.proof = handshake_proof(secret, "acceptor", *hello, challenge.nonce);
  ACCL_RETURN_IF_ERROR(write_all(fd, &challenge, sizeof(challenge), deadline));
  Digest response;
  ACCL_RETURN_IF_ERROR(read_all(fd, response.data(), response.size(), deadline));
  if (!digests_equal(response, handshake_proof(secret, "connector", *hello, challenge.nonce))) {
    return error(Code::kAborted, "wrong proof of the job's secret");
  }
  return Status::Ok();
}

}  // namespace accl
