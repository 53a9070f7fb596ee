// Job specs shared by the multi-process tests: small, synthetic, quick.
#ifndef PSTRAIN_TESTS_TEST_JOBS_H_
#define PSTRAIN_TESTS_TEST_JOBS_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace testing {

// A 32-16-4 MLP on the synthetic set, weights cut into 256-value chunks so
// every parameter of size > 256 spans servers. `extra` is appended verbatim.
inline std::string SmallJob(const std::string& extra) {
  return absl::StrCat(R"pb(
    name: "test"
    model {
      layers { type: DENSE units: 16 }
      layers { type: RELU }
      layers { type: DENSE units: 4 }
      layers { type: SOFTMAX_XENT }
    }
    data {
      dataset: SYNTHETIC
      synthetic_dim: 32
      synthetic_classes: 4
      synthetic_train_size: 2048
      synthetic_test_size: 256
    }
    seed: 7
    chunk_bytes: 1024
    log_every: 10
  )pb",
                      "\n", extra, "\n");
}

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_TEST_JOBS_H_
