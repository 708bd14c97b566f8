package web

import "github.com/chromedp/chromedp"

// BrowserPages is the URLs of the shared browser's open tabs (none if it
// does not run).
func BrowserPages() ([]string, error) {
	shared.mu.Lock()
	bctx := shared.ctx
	shared.mu.Unlock()
	if bctx == nil || bctx.Err() != nil {
		return nil, nil
	}
	infos, err := chromedp.Targets(bctx)
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, i := range infos {
		if i.Type == "page" {
			urls = append(urls, i.URL)
		}
	}
	return urls, nil
}
