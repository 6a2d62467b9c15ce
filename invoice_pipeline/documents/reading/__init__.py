"""Template-free reading of an invoice page (PDF text layer or OCR layout text).

`amounts` finds every labelled amount on the page and lets the page's own arithmetic decide
which one is payable (money fails closed); `documents.text_fields` reads the other fields.
"""
