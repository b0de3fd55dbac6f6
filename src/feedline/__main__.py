from feedline.cli.main import main

main()
