DROP TABLE IF EXISTS model_budgets;
