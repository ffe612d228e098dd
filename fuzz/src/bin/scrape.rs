//! Fuzz target `scrape`: a scraped Prometheus text page (see [`skewwatch_fuzz::scrape_page`]).

fn main() {
    skewwatch_fuzz::run(skewwatch_fuzz::scrape_page);
}
