#include "kvq/plot/label_placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvq::plot {
namespace {

struct Candidate {
  Box box;
  double cost;  // how far the label strays from where it wants to be; cheapest tried first
};

Box at(double x0, double yc, Size s) { return {x0, yc - 0.5 * s.h, x0 + s.w, yc + 0.5 * s.h}; }

// Indices of the requests with a label, top to bottom (then left to right).
std::vector<std::size_t> top_down(std::span<const LabelRequest> q) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < q.size(); ++i)
    if (q[i].size.w > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return q[a].y != q[b].y ? q[a].y < q[b].y : q[a].x < q[b].x;
  });
  return order;
}

// Where each label's centre wants to be vertically. Dots at one x (schemes with equal bits) form
// a column whose labels would fight for the same rows; they are spread like lines of text, each
// run of touching labels centred on its dots (merging runs until none touch, as in
// pool-adjacent-violators) and kept inside the bounds. Other labels want their dot's y.
std::vector<double> target_rows(std::span<const LabelRequest> q, const Box& bounds, double r) {
  std::vector<double> target(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) target[i] = q[i].y;
  const std::vector<std::size_t> order = top_down(q);
  std::vector<bool> done(q.size());
  for (std::size_t first : order) {
    if (done[first]) continue;
    std::vector<std::size_t> column;  // top to bottom
    for (std::size_t i : order)
      if (!done[i] && std::abs(q[i].x - q[first].x) <= r) column.push_back(i), done[i] = true;
    struct Run {
      std::size_t begin, end;  // into `column`
      double top, height;
    };
    std::vector<Run> runs;
    auto centre_run = [&](Run& run) {  // top = mean over members of (wanted centre - offset)
      double offset = 0, sum = 0;
      for (std::size_t k = run.begin; k < run.end; ++k) {
        const double h = q[column[k]].size.h + 1;
        sum += q[column[k]].y - (offset + 0.5 * h);
        offset += h;
      }
      run.height = offset;
      run.top = std::clamp(sum / static_cast<double>(run.end - run.begin), bounds.y0,
                           std::max(bounds.y0, bounds.y1 - offset));
    };
    for (std::size_t k = 0; k < column.size(); ++k) {
      runs.push_back({k, k + 1, 0, 0});
      centre_run(runs.back());
      while (runs.size() > 1 &&
             runs[runs.size() - 2].top + runs[runs.size() - 2].height > runs.back().top) {
        runs[runs.size() - 2].end = runs.back().end;
        runs.pop_back();
        centre_run(runs.back());
      }
    }
    for (const Run& run : runs) {
      double y = run.top;
      for (std::size_t k = run.begin; k < run.end; ++k) {
        const double h = q[column[k]].size.h + 1;
        target[column[k]] = y + 0.5 * h;
        y += h;
      }
    }
  }
  return target;
}

// Every spot for one label, cheapest first: beside its dot at its target row, then moved up or
// down half a line at a time, centred above / below the dot, and further out sideways.
std::vector<Candidate> candidates(const LabelRequest& q, double ty, const Box& bounds, double r,
                                  double gap) {
  const Size s = q.size;
  const double right = q.x + r + gap, left = q.x - r - gap - s.w;
  std::vector<Candidate> out = {
      {at(right, ty, s), 0},
      {at(left, ty, s), 0.5},
      // After the sides have moved two half-lines: a centred label blocks both side columns.
      {at(q.x - 0.5 * s.w, q.y - r - gap - 0.5 * s.h, s), 4.5},
      {at(q.x - 0.5 * s.w, q.y + r + gap + 0.5 * s.h, s), 5},
  };
  const double step = 0.5 * s.h + 1;
  const int steps = static_cast<int>(std::ceil(bounds.height() / step));
  const int columns = static_cast<int>(std::ceil(bounds.width() / (s.w + gap)));
  for (int k = 1; k <= steps; ++k)
    for (int sign : {1, -1})
      for (int c = 0; c <= columns; ++c) {
        const double dy = sign * k * step, dx = c * (s.w + gap);
        // Moving out sideways costs as much as several lines: it crosses other columns.
        const double cost = 2 + std::abs(dy) / step + 4.0 * c + (sign < 0 ? 0.25 : 0);
        out.push_back({at(right + dx, ty + dy, s), cost});
        out.push_back({at(left - dx, ty + dy, s), cost + 0.5});
      }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost < b.cost; });
  return out;
}

}  // namespace

std::vector<std::optional<Box>> place_labels(std::span<const LabelRequest> requests,
                                             const Box& bounds, double dot_radius, double gap) {
  std::vector<Box> taken;
  for (const auto& q : requests) taken.push_back(Box{q.x, q.y, q.x, q.y}.inflated(dot_radius));
  const std::vector<double> target = target_rows(requests, bounds, dot_radius);
  std::vector<std::optional<Box>> placed(requests.size());
  for (std::size_t i : top_down(requests)) {
    for (const auto& c : candidates(requests[i], target[i], bounds, dot_radius, gap)) {
      if (!bounds.contains(c.box)) continue;
      if (std::any_of(taken.begin(), taken.end(), [&](const Box& t) { return t.overlaps(c.box); }))
        continue;
      placed[i] = c.box;
      taken.push_back(c.box);
      break;
    }
  }
  return placed;
}

bool label_is_adjacent(const LabelRequest& request, const Box& box, double dot_radius, double gap) {
  return box.distance_to(request.x, request.y) <= dot_radius + gap + 0.5;
}

}  // namespace kvq::plot
