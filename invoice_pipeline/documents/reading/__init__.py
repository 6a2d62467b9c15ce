"""Template-free reading of an invoice page (PDF text layer or OCR layout text).

`page_values` parses values as printed, `labels` finds the value after a label, `seller_buyer`
says who the page names, and `amounts` lets the page's own arithmetic decide which amount is
payable (money fails closed); `documents.text_fields` puts these together. Nothing here imports
`documents.text_fields` or `documents.ocr`: the reading depends only on itself and below.
"""
