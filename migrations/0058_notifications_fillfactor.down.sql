DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'notifications'::regclass LOOP
        EXECUTE format('ALTER TABLE %s RESET (fillfactor)', p);
    END LOOP;
END $$;
