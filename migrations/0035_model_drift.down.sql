-- Back to version 33: no drift embeddings, no model versions.
DROP TABLE model_versions;
DROP TABLE drift_embeddings;
