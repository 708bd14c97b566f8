ALTER TABLE sources RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay);
DROP TABLE sync_run_hours;
