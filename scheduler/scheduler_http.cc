#include "scheduler/scheduler_http.h"

#include "common/metrics.h"
#include "common/status_json.h"

namespace pstrain {

extern const char kDashboardHtml[];  // scheduler/dashboard/index.html (a genrule)

absl::StatusOr<std::unique_ptr<HttpServer>> ServeSchedulerHttp(const std::string& host, int port,
                                                               SchedulerService* service,
                                                               const RunHistory* history) {
  std::map<std::string, HttpHandler> pages;
  pages["/metrics"] = [service] {
    const ClusterStatus st = service->GetStatus();
    PrometheusText out;
    WriteDaemonMetrics(st.scheduler(), ProcessLatencies(), &out);
    WriteClusterMetrics(st, &out);
    return HttpResponse{200, kPrometheusContentType, out.text()};
  };
  pages["/"] = [] { return HttpResponse{200, "text/html; charset=utf-8", kDashboardHtml}; };
  pages["/api/status"] = [service, history] {
    DashboardData data;
    *data.mutable_status() = service->GetStatus();
    for (RunPoint& p : history->Points()) *data.add_history() = std::move(p);
    absl::StatusOr<std::string> json = StatusJson(data);
    if (!json.ok()) return HttpResponse{500, "text/plain; charset=utf-8", "cannot encode\n"};
    return HttpResponse{200, "application/json", *json};
  };
  return HttpServer::Start(host, port, std::move(pages));
}

}  // namespace pstrain
