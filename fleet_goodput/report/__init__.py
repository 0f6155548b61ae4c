"""The scheduled goodput report: one offline HTML page per period, published only on clean data.

    mpg report --output OUT [--date D | --from D --to D]

figures.py queries the period's figures from the views, advice.py turns
measured checkpoint costs and disruptions into interval advice (MPG.md
section 5), svg.py draws the charts, page.py lays out the page, publish.py
writes it with its CSVs and swaps it into OUTPUT/reports/<period>/.
"""
