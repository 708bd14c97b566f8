DELETE FROM host_limits WHERE credential <> '' OR per_second = 0;
ALTER TABLE host_limits DROP CONSTRAINT host_limits_per_second_check;
ALTER TABLE host_limits ADD CONSTRAINT host_limits_per_second_check CHECK (per_second > 0);
ALTER TABLE host_limits DROP CONSTRAINT host_limits_pkey;
ALTER TABLE host_limits ADD PRIMARY KEY (host);
ALTER TABLE host_limits DROP COLUMN credential;
