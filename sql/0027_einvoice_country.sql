-- The country whose e-invoicing rules an org receives under (issue 55; ReviewPolicy.einvoice_country,
-- domain/review.py). 'DE': a German seller's Factur-X/ZUGFeRD MINIMUM or BASIC WL document, which has
-- no invoice lines and so is no e-invoice under the German rules from 2025, is held not_an_einvoice.
-- NULL (every existing org): no country's rules beyond EN 16931.
ALTER TABLE review_policies ADD COLUMN einvoice_country text CHECK (einvoice_country IN ('DE'));
