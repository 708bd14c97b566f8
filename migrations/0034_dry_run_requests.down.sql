DROP TABLE dry_run_requests;
