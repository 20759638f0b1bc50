"""DP-SGD (Abadi et al. 2016): its config (:mod:`.config`), how a run spends its budget (:mod:`.plan`),
DP-PCA (:mod:`.pca`) and the one training loop every DP-SGD-trained defense runs (:mod:`.training`),
which registers ``dpsgd``."""
