-- Back to version 23: sync_run_hours with the fill factor of version 10.
ALTER TABLE sync_run_hours RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay);
ALTER TABLE sync_run_hours SET (fillfactor = 70);
