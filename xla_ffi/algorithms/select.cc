#include "algorithms/select.h"

#include <algorithm>
#include <cmath>

#include "transport/local.h"

namespace accl {

CostModel& cost_model() {
  static CostModel model;
  return model;
}

double predict_seconds(Algorithm algorithm, int n, size_t bytes, bool peer_memory,
                       const CostModel& m) {
  if (n <= 1) return 0.0;
  const double S = static_cast<double>(bytes), a = m.alpha_s, b = m.beta_s_per_byte,
               g = m.gamma_s_per_byte;
  int p = 1, log_p = 0;
  while (p * 2 <= n) p *= 2, ++log_p;
  const double fold = (p != n) ? 1.0 : 0.0;  // halving-doubling's extra fold/unfold
  if (peer_memory) {
    // Ranks share memory: a "message" is the receiver reading the sender's buffer, so
    // count bytes of memory traffic per rank. A reduction step reads two operands and
    // writes one (3 per element), a copy step reads one and writes one (2).
    switch (algorithm) {
      case Algorithm::kDirect:
        return (bytes > LocalExchange::kEagerBytes ? 2 : 1) * a + (n + 1) * S * b;
      case Algorithm::kReduceBroadcast:
        return 2 * a + 2 * S * b + S * g;
      case Algorithm::kRing:
        return 2.0 * (n - 1) * a + 5.0 * (n - 1) / n * S * b + double(n - 1) / n * S * g;
      case Algorithm::kHalvingDoubling:
        return 2.0 * (log_p + fold) * a + (5.0 * (p - 1) / p + 5.0 * fold) * S * b +
               double(p - 1) / p * S * g;
      case Algorithm::kHierarchical:
      case Algorithm::kAuto: break;
    }
    return INFINITY;
  }
  switch (algorithm) {
    case Algorithm::kDirect:
      return a + (n - 1) * S * (b + g);
    case Algorithm::kRing:
      return 2.0 * (n - 1) * a + 2.0 * (n - 1) / n * S * b + double(n - 1) / n * S * g;
    case Algorithm::kHalvingDoubling:
      return 2.0 * (log_p + fold) * a + 2.0 * (p - 1) / p * S * b + double(p - 1) / p * S * g +
             fold * (2.0 * S * b + S * g);
    case Algorithm::kReduceBroadcast:
    case Algorithm::kHierarchical:
    case Algorithm::kAuto: break;
  }
  return INFINITY;
}

CostModel network_model(const CostModel& model, int rails) {
  CostModel net = model;
  net.alpha_s = model.net_alpha_s;
  net.beta_s_per_byte = model.net_beta_s_per_byte / std::max(1, rails);
  return net;
}

Algorithm choose_algorithm(int n, size_t bytes, bool peer_memory, const CostModel& model) {
  Algorithm best = Algorithm::kDirect;
  double best_t = predict_seconds(best, n, bytes, peer_memory, model);
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kReduceBroadcast}) {
    double t = predict_seconds(a, n, bytes, peer_memory, model);
    if (t < best_t) best = a, best_t = t;
  }
  return best;
}

}  // namespace accl
