// How closely a (pruned) text encoder's embeddings agree with a reference model's on the same texts: the
// metrics of docs/accuracy.md's pruning tables.
#pragma once
#include <cstdint>
#include <vector>

namespace sparse24::engine {

struct EmbeddingAgreement {
  int64_t texts = 0;
  double mean_cosine = 0, min_cosine = 0;  // cosine of each text's two embeddings
  int64_t pairs = 0;                       // text pairs the Spearman correlation ran over
  double spearman = 0;                     // of the two models' cosine similarities over those pairs
  int k = 10;
  double recall_at_k = 0;  // mean share of each text's k nearest neighbours (cosine, reference model) that
                           // the model also ranks among its k nearest
};

// a (the model) and b (the reference): row-major [n, dim] embeddings of the same n >= k + 1 texts, in any
// scale (each is normalized here). Every pair i < j counts when there are at most max_pairs of them, else
// max_pairs pairs drawn at random (seeded). Nearest-neighbour ties go to the lower index. Error on n or
// dim < 1, non-finite values or a zero embedding.
EmbeddingAgreement compare_embeddings(const std::vector<float>& a, const std::vector<float>& b, int64_t n,
                                      int64_t dim, int k = 10, int64_t max_pairs = 20000000,
                                      uint64_t seed = 1);

// Each text's cosine of its two embeddings (a and b row-major [n, dim]); Error as compare_embeddings.
std::vector<double> row_cosines(const std::vector<float>& a, const std::vector<float>& b, int64_t n,
                                int64_t dim);

// Spearman's rank correlation (ties get their average rank); 0 when either side is constant. Error if the
// sizes differ or are below 2.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace sparse24::engine
