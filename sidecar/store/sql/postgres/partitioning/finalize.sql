-- The statement that finishes an interrupted DETACH … CONCURRENTLY of :part from :parent.
SELECT format('ALTER TABLE %s DETACH PARTITION %s FINALIZE',
              :parent::text::regclass, :part::text::regclass);
