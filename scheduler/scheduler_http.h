// The scheduler's HTTP endpoint (--metrics_port): /metrics (the scheduler's
// own metrics and the whole job's), / (the dashboard, embedded in the
// binary) and /api/status (what the dashboard reads: the cluster's Status
// and the job's curves, as JSON).
#ifndef PSTRAIN_SCHEDULER_SCHEDULER_HTTP_H_
#define PSTRAIN_SCHEDULER_SCHEDULER_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "scheduler/run_history.h"
#include "scheduler/scheduler_service.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<HttpServer>> ServeSchedulerHttp(const std::string& host, int port,
                                                               SchedulerService* service,
                                                               const RunHistory* history);

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_SCHEDULER_HTTP_H_
