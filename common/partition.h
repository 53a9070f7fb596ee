// The deterministic map from parameters to chunks to servers. Every party
// computes the same map from the job spec and the server count.
#ifndef PSTRAIN_COMMON_PARTITION_H_
#define PSTRAIN_COMMON_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"

namespace pstrain {

// A contiguous slice of one parameter, stored by one server.
struct ChunkInfo {
  int32_t id = 0;      // index in Partition::chunks()
  int32_t param = 0;   // index in the parameter list
  int64_t offset = 0;  // first element within the parameter
  int64_t numel = 0;
  int32_t server = 0;
};

class Partition {
 public:
  // Cuts each parameter into chunks of at most `chunk_bytes` (fp32 elements;
  // whole rows of a 2-D parameter whose rows fit)
  // and assigns them to `num_servers` servers, greedily by size: largest chunk
  // first (ties by id) to the server holding the fewest bytes (ties by id).
  static absl::StatusOr<Partition> Make(const std::vector<ParamInfo>& params, int64_t chunk_bytes,
                                        int num_servers);

  // The same chunks on other servers: chunk i on servers[i], of
  // `num_servers` (ids 0 .. num_servers - 1, each below it; checked by the
  // caller).
  Partition Reassigned(const std::vector<int32_t>& servers, int num_servers) const;

  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  // Chunk ids of one server / one parameter, ascending.
  // (None for a server past the partition's: one that joined the job
  // after the placement it was made by.)
  const std::vector<int32_t>& ServerChunks(int server) const {
    static const std::vector<int32_t> kNone;
    return server >= 0 && server < num_servers() ? by_server_[server] : kNone;
  }
  const std::vector<int32_t>& ParamChunks(int param) const { return by_param_[param]; }
  int num_servers() const { return static_cast<int>(by_server_.size()); }
  int64_t ServerBytes(int server) const;

 private:
  std::vector<ChunkInfo> chunks_;
  std::vector<std::vector<int32_t>> by_server_;
  std::vector<std::vector<int32_t>> by_param_;
};

// Standby copies (JobSpec.standby_copies = 1): server `home`'s chunks are held
// by a pair, `home` itself and the next server by id, which keeps a
// standby copy of them.
inline int StandbyServerOf(int home, int num_servers) { return (home + 1) % num_servers; }
// The other server of `home`'s pair than `server` (one of the two).
inline int PairPartner(int home, int server, int num_servers) {
  return server == home ? StandbyServerOf(home, num_servers) : home;
}
// The home servers whose chunks server `server` holds: its own, and with
// standby copies the previous server's (whose standby it is).
std::vector<int> HeldHomes(int server, int num_servers, int standby_copies);
// The chunks server `server` holds, its home servers' in the order of
// HeldHomes, each's ascending.
std::vector<int32_t> HeldChunks(const Partition& partition, int server, int standby_copies);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PARTITION_H_
