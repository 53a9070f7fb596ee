#include "tools/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
namespace {

// What one panel plots: `series` is gnuplot's list after `plot`, empty
// when the column has no point yet (gnuplot refuses to draw a series whose
// every point is undefined, so such a panel is an empty frame with a note).
std::string Panel(const std::string& title, const std::string& series) {
  if (series.empty()) {
    return absl::StrCat("set title '", title, "'\nset label 1 'no points yet' at graph 0.5,0.5 center\n",
                        "set yrange [0:1]\nplot 2 notitle\nunset label 1\nset yrange [*:*]\n");
  }
  return absl::StrCat("set title '", title, "'\nplot ", series, "\n");
}

// Which of a run's curves have measured points (-1: none yet).
struct Measured {
  bool loss = false, rate = false;
  bool evaluated = false;  // an accuracy or validation loss
  bool accuracy = false;   // an accuracy (else validation losses)
};

// The gnuplot script of the four panels, reading `data` (whitespace
// columns: clock, loss, accuracy, samples/s, then each worker's clock).
std::string Script(const std::string& data, const std::string& out, bool svg, int workers,
                   const Measured& m) {
  const std::string file = absl::StrCat("'", data, "'");
  std::string clocks;
  for (int w = 0; w < workers; ++w) {
    absl::StrAppend(&clocks, w ? ", " : "", file, " using 1:($", 5 + w, " >= 0 ? $", 5 + w,
                    " : 1/0) with lines title 'worker ", w, "'");
  }
  return absl::StrCat(
      svg ? "set terminal svg size 1200,800 dynamic\n" : "set terminal png size 1200,800\n",
      "set output '", out, "'\nset multiplot layout 2,2 title 'pstrain run'\n",
      "set grid\nset xlabel 'clock'\nset key off\n",
      Panel("training loss", m.loss ? file + " using 1:($2 >= 0 ? $2 : 1/0) with lines lw 2" : ""),
      Panel(!m.evaluated ? "evaluation" : m.accuracy ? "test accuracy" : "validation loss",
            m.evaluated ? file + " using 1:($3 >= 0 ? $3 : 1/0) with linespoints" : ""),
      Panel("samples/s", m.rate ? file + " using 1:($4 >= 0 ? $4 : 1/0) with lines" : ""),
      "set key left top\n",
      Panel("worker clocks", clocks), "unset multiplot\n");
}

int RunGnuplot(const std::string& script_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("gnuplot", "gnuplot", script_path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

absl::StatusOr<std::vector<RunPoint>> ReadCurves(const std::string& run_dir) {
  const std::string path = run_dir + "/curves.jsonl";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read (is --run_dir right?)"));
  std::vector<RunPoint> points;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    RunPoint p;
    if (!google::protobuf::util::JsonStringToMessage(line, &p).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": not a run point"));
    }
    points.push_back(std::move(p));
  }
  if (points.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no points yet"));
  return points;
}

int Plot(const std::string& run_dir, const std::string& out) {
  const bool svg = absl::EndsWith(out, ".svg");
  if (run_dir.empty() || (!svg && !absl::EndsWith(out, ".png"))) {
    std::fprintf(stderr, "psctl plot: give --run_dir and --out=FILE.png or FILE.svg\n");
    return 2;
  }
  const absl::StatusOr<std::vector<RunPoint>> points = ReadCurves(run_dir);
  if (!points.ok()) {
    std::fprintf(stderr, "psctl plot: %s\n", std::string(points.status().message()).c_str());
    return 1;
  }
  int workers = 0;
  Measured m;
  for (const RunPoint& p : *points) {
    workers = std::max(workers, p.worker_clocks_size());
    m.loss = m.loss || p.loss() >= 0;
    m.rate = m.rate || p.samples_per_s() >= 0;
    m.accuracy = m.accuracy || p.test_accuracy() >= 0;
    m.evaluated = m.evaluated || p.test_accuracy() >= 0 || p.validation_loss() >= 0;
  }
  const std::string data = out + ".dat", script = out + ".gp";
  {
    std::ofstream d(data);
    for (const RunPoint& p : *points) {
      d << p.clock() << ' ' << p.loss() << ' '
        << (m.accuracy ? p.test_accuracy() : p.validation_loss()) << ' ' << p.samples_per_s();
      for (int w = 0; w < workers; ++w) {
        d << ' ' << (w < p.worker_clocks_size() ? p.worker_clocks(w) : -1);
      }
      d << '\n';
    }
    std::ofstream(script) << Script(data, out, svg, workers, m);
  }
  const int code = RunGnuplot(script);
  std::remove(data.c_str());
  std::remove(script.c_str());
  if (code != 0) {
    std::fprintf(stderr, "psctl plot: %s\n",
                 code == 127 ? "gnuplot not found (install gnuplot-nox)"
                             : absl::StrCat("gnuplot exited ", code, " (its message is above)").c_str());
    return 1;
  }
  std::printf("wrote %s: %zu points\n", out.c_str(), points->size());
  return 0;
}

}  // namespace pstrain
