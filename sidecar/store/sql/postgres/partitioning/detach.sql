-- The statement that detaches :part from :parent without blocking deliveries (run as it is:
-- DETACH … CONCURRENTLY cannot run in a transaction, nor take parameters).
SELECT format('ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY',
              :parent::text::regclass, :part::text::regclass);
