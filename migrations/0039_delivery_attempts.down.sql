DROP INDEX IF EXISTS sign_in_links_used_idx;
DROP TABLE IF EXISTS delivery_attempts;
