"""The scheduled goodput report: offline HTML pages per period, published only on clean data.

    mpg report --output OUT [--date D | --from D --to D]

figures.py reads the period's figures from the day-grain marts, advice.py
turns measured checkpoint costs and disruptions into interval advice (docs/metric.md
section 5), charts.py places the charts' marks, render.py fills the jinja2
templates (templates/, autoescaped), publish.py writes the pages with their
CSVs and swaps them into OUTPUT/reports/<period>/.
"""
