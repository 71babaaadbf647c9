// Entry point: global styles, a usable page language, then the root component. The app is
// imported after the language check because uPlot reads `navigator.language` as it loads.
import './app.css';
import { mount } from 'svelte';
import { ensureUsableLanguage } from './lib/locale';

ensureUsableLanguage();

const target = document.getElementById('app');
if (!target) throw new Error('index.html has no #app element');

const { default: App } = await import('./App.svelte');
export default mount(App, { target });
