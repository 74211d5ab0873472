from brb_pipeline.cli.app import main

main()
