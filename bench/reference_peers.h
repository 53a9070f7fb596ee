// The references bench/transport_bench measures pstrain's transport
// against, each in a child process it forks: a plain TCP stream (the
// ceiling of the gRPC path) and a default-settings gRPC unary call.
#ifndef PSTRAIN_BENCH_REFERENCE_PEERS_H_
#define PSTRAIN_BENCH_REFERENCE_PEERS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstrain {

// All of `n` bytes written to (read from) `fd`; false on an error or EOF.
bool WriteAll(int fd, const char* p, size_t n);
bool ReadAll(int fd, char* p, size_t n);

// What the TCP peer is asked, before the bytes.
struct TcpHeader {
  uint64_t mode;  // 0 push (data in, 1-byte ack), 1 pull (data out), 2 echo, 3 quit
  uint64_t bytes;
};

// Forks the TCP peer (answering TcpHeaders of up to `max_bytes` on one
// connection until told to quit); returns a connected socket. Exits on an
// error.
int StartTcpPeer(size_t max_bytes);

// Forks a child serving bench.Echo with default settings (but the message
// size limits) until this process exits; returns its address. Call before
// this process uses gRPC.
std::string StartGrpcPeer(size_t max_bytes);

}  // namespace pstrain

#endif  // PSTRAIN_BENCH_REFERENCE_PEERS_H_
