// Greedy placement of point labels. Labels of dots at one x (a column: schemes with equal bits)
// first get target rows spread like lines of text around their dots; then, from the topmost dot
// down, each label takes the first candidate box (beside its dot at its target row, then moved
// down or up half a line at a time, centred above or below, then further out sideways) that
// stays inside the bounds and overlaps no dot and no label placed before it. Labels moved away
// from their dot get a leader line from the caller.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "kvq/plot/geometry.h"

namespace kvq::plot {

struct LabelRequest {
  double x = 0, y = 0;  // the dot's centre
  Size size;            // the label's text box; w == 0: no label (the dot still blocks others)
};

// One box per request (nullopt for an empty label or one for which no free spot exists).
// `dot_radius` is the radius every dot keeps clear, `gap` the space between a dot and its label.
std::vector<std::optional<Box>> place_labels(std::span<const LabelRequest> requests,
                                             const Box& bounds, double dot_radius,
                                             double gap = 3.0);

// True when the label's box is within `gap` of its dot's rim (beside it, or nudged by half a
// line), so no leader line is needed.
bool label_is_adjacent(const LabelRequest& request, const Box& box, double dot_radius,
                       double gap = 3.0);

}  // namespace kvq::plot
