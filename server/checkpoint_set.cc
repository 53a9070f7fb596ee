#include "server/checkpoint_set.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"

namespace pstrain {

absl::StatusOr<CheckpointSet> CheckpointSet::Open(const std::string& dir, int64_t clock) {
  CheckpointSet set;
  set.dir_ = dir;
  set.clock_ = clock;
  for (int server : CheckpointServers(dir, clock)) {
    absl::StatusOr<CheckpointFile> file = CheckpointFile::Open(CheckpointPath(dir, server, clock));
    if (!file.ok()) return file.status();
    for (const std::string& name : file->chunk_names()) {
      auto [it, fresh] = set.holding_.emplace(name, set.files_.size());
      if (!fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", name, " is in two checkpoint files of clock ", clock, ": ",
                         set.files_[it->second].path(), " and ", file->path()));
      }
    }
    set.files_.push_back(*std::move(file));
  }
  if (set.files_.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint file of clock ", clock, " in ", dir));
  }
  return set;
}

absl::StatusOr<const CheckpointFile*> CheckpointSet::Holding(const std::string& name) const {
  auto it = holding_.find(name);
  if (it == holding_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint file of clock ", clock_, " in ", dir_, " holds chunk ", name));
  }
  return &files_[it->second];
}

std::vector<int> CheckpointSet::servers() const {
  std::vector<int> out;
  for (const CheckpointFile& f : files_) out.push_back(f.server());
  return out;
}

}  // namespace pstrain
