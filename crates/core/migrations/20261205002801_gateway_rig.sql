-- The paired rig that answered a gateway request the desk forwarded to it (NULL: this daemon's
-- own engine answered, or nobody did).
ALTER TABLE gateway_requests ADD COLUMN rig TEXT;
