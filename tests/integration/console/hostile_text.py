"""Text an agent or an end user chose, written to run if a page ever rendered it as markup."""

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
XSS_TASK = 'x" onmouseover="window.__pwned = 3" <b>bold</b>'
