"""What a page's tables say, as a reader sees them."""


def rows(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
    )
