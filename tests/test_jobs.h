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

// 16 overlapping classes in 8 features, harder than SmallJob's data so that
// an accuracy comparison has room to fail; a 32-16 MLP under Adam and BSP,
// batch 32. `extra` adds the clocks, the seed and anything else.
inline std::string SixteenClassJob(const std::string& extra) {
  return absl::StrCat(R"pb(
                        model {
                          layers { type: DENSE units: 32 }
                          layers { type: RELU }
                          layers { type: DENSE units: 16 }
                          layers { type: SOFTMAX_XENT }
                        }
                        data {
                          dataset: SYNTHETIC
                          synthetic_dim: 8
                          synthetic_classes: 16
                          synthetic_train_size: 4096
                          synthetic_test_size: 1024
                        }
                        optimizer { type: ADAM learning_rate: 0.01 }
                        consistency: BSP
                        batch_size: 32
                        log_every: 50
                      )pb",
                      "\n", extra, "\n");
}

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_TEST_JOBS_H_
