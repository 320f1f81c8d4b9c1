#include "algorithms/select.h"

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
  switch (algorithm) {
    case Algorithm::kDirect:
      if (peer_memory && bytes > LocalExchange::kEagerBytes) return 2 * a + (n - 1) * S * (b + g);
      return a + (n - 1) * S * (b + g);
    case Algorithm::kReduceBroadcast:
      return peer_memory ? 2 * a + 2 * S * b + S * g : INFINITY;
    case Algorithm::kRing:
      return 2.0 * (n - 1) * a + 2.0 * (n - 1) / n * S * b + double(n - 1) / n * S * g;
    case Algorithm::kHalvingDoubling: {
      int p = 1, steps = 0;
      while (p * 2 <= n) p *= 2, ++steps;
      double t = 2.0 * steps * a + 2.0 * (p - 1) / p * S * b + double(p - 1) / p * S * g;
      if (p != n) t += 2.0 * a + 2.0 * S * b + S * g;
      return t;
    }
    case Algorithm::kAuto: break;
  }
  return INFINITY;
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
